//! The two wire values every cluster message leans on: UUID strings ([`PeerUuid`]: either case
//! read, a peer's text kept so its ids are echoed exactly, Hearth's own written in uppercase as
//! the Swift app does) and dates as seconds since 2001-01-01 ([`AppleTime`]).

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A UUID as it travels: `8-4-4-4-12` hex digits of either case. Equal when the UUIDs are
/// equal, whatever their case; written back exactly as it was read.
#[derive(Debug, Clone)]
pub struct PeerUuid(String);

impl PeerUuid {
    /// Read a UUID string; `None` when it is not `8-4-4-4-12` hex digits.
    pub fn parse(s: &str) -> Option<Self> {
        let groups: Vec<&str> = s.split('-').collect();
        let shape_ok = groups.len() == 5
            && groups
                .iter()
                .zip([8, 4, 4, 4, 12])
                .all(|(g, n)| g.len() == n && g.bytes().all(|b| b.is_ascii_hexdigit()));
        shape_ok.then(|| Self(s.to_owned()))
    }

    /// Hearth's own id from 16 bytes (random ones, from the node), in uppercase.
    pub fn from_bytes(b: [u8; 16]) -> Self {
        let hex: String = b.iter().map(|x| format!("{x:02X}")).collect();
        Self(format!(
            "{}-{}-{}-{}-{}",
            &hex[0..8],
            &hex[8..12],
            &hex[12..16],
            &hex[16..20],
            &hex[20..32]
        ))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl PartialEq for PeerUuid {
    fn eq(&self, other: &Self) -> bool {
        self.0.eq_ignore_ascii_case(&other.0)
    }
}

impl Eq for PeerUuid {}

impl std::hash::Hash for PeerUuid {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        for b in self.0.bytes() {
            state.write_u8(b.to_ascii_uppercase());
        }
    }
}

impl PartialOrd for PeerUuid {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// By the UUID's value (NOTES.md's duplicate-connection rule compares device ids).
impl Ord for PeerUuid {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0
            .bytes()
            .map(|b| b.to_ascii_uppercase())
            .cmp(other.0.bytes().map(|b| b.to_ascii_uppercase()))
    }
}

impl fmt::Display for PeerUuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Serialize for PeerUuid {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for PeerUuid {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Self::parse(&s).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "expected a UUID, got '{}'",
                s.chars().take(40).collect::<String>()
            ))
        })
    }
}

/// Seconds between the Unix epoch and 2001-01-01 (Apple's reference date).
const APPLE_EPOCH_UNIX_SECS: f64 = 978_307_200.0;

/// A date as the cluster sends it: seconds since 2001-01-01 UTC.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct AppleTime(pub f64);

impl AppleTime {
    pub fn from_system(t: SystemTime) -> Self {
        let unix = t
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        Self(unix - APPLE_EPOCH_UNIX_SECS)
    }

    pub fn now() -> Self {
        Self::from_system(SystemTime::now())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuids_of_either_case_are_one_id_and_keep_their_text() {
        let lower = PeerUuid::parse("550e8400-e29b-41d4-a716-446655440000").unwrap();
        let upper = PeerUuid::parse("550E8400-E29B-41D4-A716-446655440000").unwrap();
        assert_eq!(lower, upper);
        assert_eq!(lower.as_str(), "550e8400-e29b-41d4-a716-446655440000");
        let set: std::collections::HashSet<PeerUuid> = [lower.clone(), upper.clone()].into();
        assert_eq!(set.len(), 1, "one id, whatever the case");
        for bad in [
            "",
            "550e8400e29b41d4a716446655440000",
            "550e8400-e29b-41d4-a716-44665544000g",
            "550e8400-e29b-41d4-a716-4466554400000",
            "550e8400-e29b-41d4-a716",
        ] {
            assert!(PeerUuid::parse(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn hearths_own_ids_are_uppercase_and_ordered_by_value() {
        let id = PeerUuid::from_bytes([0xab; 16]);
        assert_eq!(id.as_str(), "ABABABAB-ABAB-ABAB-ABAB-ABABABABABAB");
        assert!(PeerUuid::parse(id.as_str()).is_some());
        let small = PeerUuid::parse("0a000000-0000-0000-0000-000000000000").unwrap();
        let big = PeerUuid::parse("0B000000-0000-0000-0000-000000000000").unwrap();
        assert!(small < big);
    }

    #[test]
    fn apple_dates_count_from_2001() {
        let t = UNIX_EPOCH + std::time::Duration::from_secs(978_307_200 + 798_134_400);
        assert_eq!(AppleTime::from_system(t), AppleTime(798_134_400.0));
    }
}
