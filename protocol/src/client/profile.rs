//! A user's public profile: display name, avatar URL and region, carried compactly in member
//! lists and room events so a client needs no second lookup.

use serde::{Deserialize, Serialize};

/// Longest display name, in characters.
pub const MAX_NAME_CHARS: usize = 32;
/// Longest avatar URL, in bytes.
pub const MAX_AVATAR_BYTES: usize = 256;
/// Longest region code, in bytes.
pub const MAX_REGION_BYTES: usize = 16;

/// A user's public profile. Every field is optional and left out of JSON when unset.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Profile {
    /// Display name: 1..=32 characters, no control characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Avatar URL: `https://` or `http://`, at most 256 bytes, no whitespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub avatar: Option<String>,
    /// Region code, e.g. `eu` or `sa-east`: 1..=16 of `[A-Za-z0-9-]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
}

impl Profile {
    /// Whether no field is set.
    pub fn is_empty(&self) -> bool {
        self.name.is_none() && self.avatar.is_none() && self.region.is_none()
    }

    /// Checks every set field against its bounds.
    ///
    /// # Errors
    /// A short reason naming the first field that is out of bounds.
    pub fn validate(&self) -> Result<(), &'static str> {
        if let Some(n) = &self.name
            && !valid_name(n)
        {
            return Err("name: 1..=32 characters, no control characters");
        }
        if let Some(a) = &self.avatar
            && !valid_avatar(a)
        {
            return Err("avatar: an http(s) URL of at most 256 bytes, no whitespace");
        }
        if let Some(r) = &self.region
            && !valid_region(r)
        {
            return Err("region: 1..=16 of [A-Za-z0-9-]");
        }
        Ok(())
    }

    /// `self` with the fields `update` sets replaced (an empty string clears a field).
    #[must_use]
    pub fn merged(&self, update: &Profile) -> Profile {
        fn pick(old: &Option<String>, new: &Option<String>) -> Option<String> {
            match new {
                Some(s) if s.is_empty() => None,
                Some(s) => Some(s.clone()),
                None => old.clone(),
            }
        }
        Profile {
            name: pick(&self.name, &update.name),
            avatar: pick(&self.avatar, &update.avatar),
            region: pick(&self.region, &update.region),
        }
    }
}

fn valid_name(n: &str) -> bool {
    let chars = n.chars().count();
    (1..=MAX_NAME_CHARS).contains(&chars) && !n.chars().any(char::is_control)
}

fn valid_avatar(a: &str) -> bool {
    a.len() <= MAX_AVATAR_BYTES
        && (a.starts_with("https://") || a.starts_with("http://"))
        && !a.chars().any(|c| c.is_whitespace() || c.is_control())
}

fn valid_region(r: &str) -> bool {
    (1..=MAX_REGION_BYTES).contains(&r.len())
        && r.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_are_checked_field_by_field() {
        let ok = Profile {
            name: Some("Ann ✨".into()),
            avatar: Some("https://cdn.example/a.png".into()),
            region: Some("eu-west".into()),
        };
        assert_eq!(ok.validate(), Ok(()));
        let long = Profile {
            name: Some("x".repeat(33)),
            ..Profile::default()
        };
        assert!(long.validate().is_err());
        let ctl = Profile {
            name: Some("a\u{7}".into()),
            ..Profile::default()
        };
        assert!(ctl.validate().is_err());
        let js = Profile {
            avatar: Some("javascript:alert(1)".into()),
            ..Profile::default()
        };
        assert!(js.validate().is_err());
        let region = Profile {
            region: Some("eu west".into()),
            ..Profile::default()
        };
        assert!(region.validate().is_err());
        assert_eq!(Profile::default().validate(), Ok(()));
    }

    #[test]
    fn unset_fields_stay_out_of_json_and_an_empty_string_clears() {
        let p = Profile {
            name: Some("Ann".into()),
            ..Profile::default()
        };
        assert_eq!(serde_json::to_string(&p).unwrap(), r#"{"name":"Ann"}"#);
        let cleared = p.merged(&Profile {
            name: Some(String::new()),
            region: Some("eu".into()),
            ..Profile::default()
        });
        assert_eq!(
            cleared,
            Profile {
                region: Some("eu".into()),
                ..Profile::default()
            }
        );
    }
}
