//! `chorus-loadtest`: the load generator (scenarios arrive with the load-test work).

fn main() {
    eprintln!("chorus-loadtest: no scenarios yet");
}
