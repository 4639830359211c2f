//! `keep_alive`: how long a model stays loaded after a request, read as Ollama reads it — a
//! number of seconds or a Go duration string (`"5m"`, `"1h30m"`, `"0"`), where any negative
//! value means "forever" and zero means "unload now".

use std::time::Duration;

use serde_json::Value;

use super::OllamaError;

/// Ollama's default when a request does not say: five minutes.
pub const DEFAULT_KEEP_ALIVE: Duration = Duration::from_secs(5 * 60);

/// A validated `keep_alive`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeepAlive {
    /// Keep the model loaded (a negative value on the wire).
    Forever,
    /// Keep it this long after the request; zero unloads it at once.
    For(Duration),
}

impl KeepAlive {
    /// `None` for an absent or `null` value (the server's default applies).
    pub fn parse(value: Option<&Value>) -> Result<Option<KeepAlive>, OllamaError> {
        match value {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) => {
                let secs = n.as_f64().unwrap_or(f64::INFINITY);
                Ok(Some(from_seconds(secs)))
            }
            Some(Value::String(s)) => parse_go_duration(s).map(Some).ok_or_else(|| {
                OllamaError::bad_request(format!(
                    "invalid keep_alive duration {s:?}: expected a number of seconds or a duration such as \"5m\", \"1h30m\", \"10s\" or \"0\""
                ))
            }),
            Some(_) => Err(OllamaError::bad_request(
                "keep_alive must be a number of seconds or a duration string such as \"5m\"",
            )),
        }
    }

    /// Zero: unload the model now (with an empty prompt or no messages, Ollama's unload request).
    pub fn is_unload(self) -> bool {
        self == KeepAlive::For(Duration::ZERO)
    }

    /// The duration, or `None` for forever.
    pub fn duration(self) -> Option<Duration> {
        match self {
            KeepAlive::Forever => None,
            KeepAlive::For(d) => Some(d),
        }
    }
}

/// Seconds as a JSON number; past what a Go duration holds (about 292 years) is forever.
fn from_seconds(secs: f64) -> KeepAlive {
    if secs < 0.0 || !secs.is_finite() || secs * 1e9 >= i64::MAX as f64 {
        KeepAlive::Forever
    } else {
        KeepAlive::For(Duration::from_nanos((secs * 1e9) as u64))
    }
}

/// Go's `time.ParseDuration`: an optional sign, then one or more decimal numbers each with a
/// unit (`ns`, `us`/`µs`/`μs`, `ms`, `s`, `m`, `h`), or a bare `0`. Values beyond Go's
/// `Duration` (int64 nanoseconds) are refused, as Go refuses them; negatives are forever.
fn parse_go_duration(s: &str) -> Option<KeepAlive> {
    let (negative, mut rest) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if rest == "0" {
        return Some(KeepAlive::For(Duration::ZERO));
    }
    if rest.is_empty() {
        return None;
    }
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let (int_part, after) = rest.split_at(int_len);
        let (frac_part, after) = match after.strip_prefix('.') {
            Some(a) => {
                let n = a.bytes().take_while(u8::is_ascii_digit).count();
                a.split_at(n)
            }
            None => ("", after),
        };
        if int_part.is_empty() && frac_part.is_empty() {
            return None;
        }
        let unit_len = after
            .char_indices()
            .find(|&(_, c)| c == '.' || c.is_ascii_digit())
            .map_or(after.len(), |(i, _)| i);
        let (unit, after) = after.split_at(unit_len);
        let unit_ns: u128 = match unit {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => return None,
        };
        total = total.checked_add(scaled(int_part, frac_part, unit_ns)?)?;
        if total > i64::MAX as u128 {
            return None;
        }
        rest = after;
    }
    Some(if negative && total > 0 {
        KeepAlive::Forever
    } else {
        KeepAlive::For(Duration::from_nanos(total as u64))
    })
}

/// `int.frac` units in nanoseconds (the fraction's digits past nanosecond precision dropped).
fn scaled(int_part: &str, frac_part: &str, unit_ns: u128) -> Option<u128> {
    let int: u128 = if int_part.is_empty() {
        0
    } else {
        // More digits than any duration has are an overflow, not a reason to parse further.
        if int_part.len() > 30 {
            return None;
        }
        int_part.parse().ok()?
    };
    let mut ns = int.checked_mul(unit_ns)?;
    let mut scale: u128 = 1;
    let mut frac: u128 = 0;
    for d in frac_part.bytes().take(18) {
        frac = frac * 10 + u128::from(d - b'0');
        scale *= 10;
    }
    ns = ns.checked_add(frac * unit_ns / scale)?;
    Some(ns)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ka(v: Value) -> Result<Option<KeepAlive>, OllamaError> {
        KeepAlive::parse(Some(&v))
    }

    fn secs(s: u64) -> Option<KeepAlive> {
        Some(KeepAlive::For(Duration::from_secs(s)))
    }

    #[test]
    fn numbers_are_seconds_and_negatives_forever() {
        assert_eq!(ka(json!(0)).unwrap(), secs(0));
        assert!(ka(json!(0)).unwrap().unwrap().is_unload());
        assert_eq!(ka(json!(300)).unwrap(), secs(300));
        assert_eq!(
            ka(json!(1.5)).unwrap(),
            Some(KeepAlive::For(Duration::from_millis(1500)))
        );
        assert_eq!(ka(json!(-1)).unwrap(), Some(KeepAlive::Forever));
        assert_eq!(ka(json!(1e300)).unwrap(), Some(KeepAlive::Forever));
        assert_eq!(ka(json!(null)).unwrap(), None);
        assert_eq!(KeepAlive::parse(None).unwrap(), None);
    }

    #[test]
    fn strings_are_go_durations() {
        for (s, want) in [
            ("0", secs(0)),
            ("5m", secs(300)),
            ("1h30m", secs(5400)),
            ("10s", secs(10)),
            ("+10s", secs(10)),
            ("0s", secs(0)),
            ("-0s", secs(0)),
            ("24h", secs(86_400)),
            ("1.5h", secs(5400)),
            (".5s", Some(KeepAlive::For(Duration::from_millis(500)))),
            ("300ms", Some(KeepAlive::For(Duration::from_millis(300)))),
            ("2us", Some(KeepAlive::For(Duration::from_micros(2)))),
            ("2µs", Some(KeepAlive::For(Duration::from_micros(2)))),
            ("7ns", Some(KeepAlive::For(Duration::from_nanos(7)))),
            ("1h0.5m3s", secs(3633)),
            ("-1", None),
            ("-5m", Some(KeepAlive::Forever)),
            ("-1m", Some(KeepAlive::Forever)),
        ] {
            let got = ka(json!(s));
            match want {
                // "-1" has no unit: Go refuses it, and so do we.
                None => assert!(got.is_err(), "{s}"),
                Some(w) => assert_eq!(got.unwrap(), Some(w), "{s}"),
            }
        }
        assert_eq!(KeepAlive::Forever.duration(), None);
        assert_eq!(
            KeepAlive::For(DEFAULT_KEEP_ALIVE).duration(),
            Some(Duration::from_secs(300))
        );
    }

    #[test]
    fn bad_durations_are_400s() {
        for bad in [
            json!(""),
            json!("5"),
            json!("abc"),
            json!("5x"),
            json!("m"),
            json!("."),
            json!("1.s.s"),
            json!("-"),
            json!("5m-3s"),
            json!("3000000h"),
            json!("99999999999999999999999999999999999h"),
            json!(true),
            json!([5]),
            json!({"minutes": 5}),
        ] {
            let e = ka(bad.clone()).expect_err("refused");
            assert_eq!(e.status, 400, "{bad}");
            assert!(e.message.contains("keep_alive"), "{e}");
        }
    }
}
