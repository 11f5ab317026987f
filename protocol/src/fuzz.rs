//! Hostile-input runs over both decoders: a million random and mutated frames each must
//! decode or be refused with a protocol error, never panic. Deterministic (a fixed-seed
//! xorshift generator), so a failure reproduces.

#![cfg(test)]

use bytes::Bytes;

use crate::client::decode_request;
use crate::error::ErrorCode;
use crate::link;

/// Frames per decoder per run.
const FRAMES: usize = 1_000_000;

struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

const SEEDS: &[&str] = &[
    r#"{"id":1,"op":"ping"}"#,
    r#"{"id":2,"op":"room.join","d":{"room":"r1","since":{"epoch":3,"seq":9},"password":"p"}}"#,
    r#"{"id":3,"op":"chat.send","d":{"room":"r1","text":"hello"}}"#,
    r#"{"id":4,"op":"seat.take","d":{"room":"r1","seat":2}}"#,
    r#"{"id":5,"op":"gift.send","d":{"room":"r","req_id":"x","gift":"rose","count":2,"to":["u2"]}}"#,
    r#"{"id":6,"op":"gift.send","d":{"room":"r","req_id":"x","gift":"rose","to":"seats"}}"#,
    r#"{"id":7,"op":"room.create","d":{"room":"r","title":"t","seats":8,"password":"p"}}"#,
    r#"{"id":8,"op":"rank.get","d":{"room":"r","board":"senders","period":"day","limit":5}}"#,
    r#"{"id":9,"op":"rank.get","d":{"scope":"app","board":"receivers","period":"week"}}"#,
];

const ALPHABET: &[u8] = b"{}[]\":,0123456789-.eEtrufalsn \\u00ff\xc3\xa9abcdefghijklmnopqrstuvwxyz";

fn mutate(rng: &mut XorShift, seed: &[u8]) -> Vec<u8> {
    let mut v = seed.to_vec();
    for _ in 0..1 + rng.below(4) {
        match rng.below(5) {
            0 if !v.is_empty() => {
                let i = rng.below(v.len());
                v[i] = ALPHABET[rng.below(ALPHABET.len())];
            }
            1 => {
                let i = rng.below(v.len() + 1);
                v.insert(i, ALPHABET[rng.below(ALPHABET.len())]);
            }
            2 if !v.is_empty() => {
                let i = rng.below(v.len());
                v.remove(i);
            }
            3 if !v.is_empty() => {
                let i = rng.below(v.len());
                v.truncate(i);
            }
            _ => {
                let i = rng.below(v.len() + 1);
                let j = rng.below(v.len() + 1);
                let (a, b) = (i.min(j), i.max(j));
                let dup = v[a..b].to_vec();
                v.splice(a..a, dup);
            }
        }
    }
    v
}

#[test]
fn a_million_hostile_client_frames_never_panic() {
    let mut rng = XorShift(0x5eed_1234_abcd_ef01);
    let (mut ok, mut refused) = (0usize, 0usize);
    for n in 0..FRAMES {
        let bytes = if n % 4 == 0 {
            (0..rng.below(64))
                .map(|_| ALPHABET[rng.below(ALPHABET.len())])
                .collect()
        } else {
            let seed = SEEDS[rng.below(SEEDS.len())];
            mutate(&mut rng, seed.as_bytes())
        };
        // The gateway only decodes text frames, which are valid UTF-8.
        let Ok(text) = std::str::from_utf8(&bytes) else {
            continue;
        };
        match decode_request(text) {
            Ok(_) => ok += 1,
            Err(e) => {
                assert!(
                    matches!(e.code, ErrorCode::BadFrame | ErrorCode::UnknownOp),
                    "{e:?}"
                );
                refused += 1;
            }
        }
    }
    assert!(ok > 1000 && refused > 100_000, "ok {ok}, refused {refused}");
}

#[test]
fn a_million_hostile_link_frames_never_panic() {
    let mut rng = XorShift(0x0dd_ba11_cafe_f00d);
    let seeds: Vec<Bytes> = vec![
        link::encode(&link::LinkFrame::Hello(link::LinkHello {
            v: link::LINK_VERSION,
            gateway: "g1".into(),
            auth: None,
        })),
        link::encode(&link::LinkFrame::ToGateway(link::ToGateway::Event(
            link::RoomEvent {
                room: "r".into(),
                audience: link::Audience::Only(vec![1, 2]),
                position: Some((1, 2)),
                frame: Bytes::from_static(b"{\"ev\":\"chat\"}"),
            },
        ))),
    ];
    let mut ok = 0usize;
    for n in 0..FRAMES {
        let body = if n % 4 == 0 {
            (0..rng.below(48)).map(|_| rng.next() as u8).collect()
        } else {
            let seed = seeds[rng.below(seeds.len())].clone();
            mutate(&mut rng, &seed)
        };
        if link::decode(Bytes::from(body)).is_ok() {
            ok += 1;
        }
    }
    assert!(ok > 0);
}
