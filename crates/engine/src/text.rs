//! Turning token text into text a client may see: a stop-string matcher that holds back any
//! tail that could still become a stop string, so a stop string never reaches the client. (Token
//! bytes become text through `hearth_protocol::utf8::Utf8Stream`.) Pure and allocation-light.

/// What the matcher decided for a piece of text.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum StopScan {
    /// No stop string matched; this much text may be released now.
    Release(String),
    /// A stop string matched; this is the text before it. Generation must end.
    Stopped(String),
}

/// Holds back text that could be the start of a stop string.
#[derive(Debug, Default)]
pub(crate) struct StopMatcher {
    stops: Vec<String>,
    held: String,
    /// The stop string that matched, once one did.
    matched: Option<String>,
}

impl StopMatcher {
    pub(crate) fn new(stops: Vec<String>) -> Self {
        Self {
            stops,
            held: String::new(),
            matched: None,
        }
    }

    /// Replace the stop strings (a `modify`), re-examining the text held so far.
    pub(crate) fn set_stops(&mut self, stops: Vec<String>) -> StopScan {
        self.stops = stops;
        let held = std::mem::take(&mut self.held);
        self.push(held)
    }

    /// Take the next piece of text; without stop strings it passes through without a copy.
    pub(crate) fn push(&mut self, text: String) -> StopScan {
        if self.stops.is_empty() {
            if self.held.is_empty() {
                return StopScan::Release(text);
            }
            let mut out = std::mem::take(&mut self.held);
            out.push_str(&text);
            return StopScan::Release(out);
        }
        self.held.push_str(&text);
        // Earliest match wins; among matches at the same place, the longest.
        let mut best: Option<(usize, &String)> = None;
        for stop in &self.stops {
            if let Some(at) = self.held.find(stop.as_str()) {
                let better = best.is_none_or(|(b, s)| at < b || (at == b && stop.len() > s.len()));
                if better {
                    best = Some((at, stop));
                }
            }
        }
        if let Some((at, stop)) = best {
            self.matched = Some(stop.clone());
            let mut before = std::mem::take(&mut self.held);
            before.truncate(at);
            return StopScan::Stopped(before);
        }
        let keep_from = self.hold_point();
        let released: String = self.held[..keep_from].to_owned();
        self.held.replace_range(..keep_from, "");
        StopScan::Release(released)
    }

    /// The earliest char boundary from which the held text is a prefix of some stop string.
    fn hold_point(&self) -> usize {
        let held = self.held.as_str();
        for (i, _) in held.char_indices() {
            let tail = &held[i..];
            if self.stops.iter().any(|s| s.starts_with(tail)) {
                return i;
            }
        }
        held.len()
    }

    /// The stop string that matched, once one did.
    pub(crate) fn matched(&self) -> Option<&str> {
        self.matched.as_deref()
    }

    /// End of generation without a stop match: release everything held.
    pub(crate) fn flush(&mut self) -> String {
        std::mem::take(&mut self.held)
    }

    pub(crate) fn reset(&mut self) {
        self.held.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_string_never_leaks_and_prefix_is_held() {
        let mut m = StopMatcher::new(vec!["END".into()]);
        assert_eq!(m.push("hello E".into()), StopScan::Release("hello ".into()));
        assert_eq!(m.push("N".into()), StopScan::Release(String::new()));
        assert_eq!(m.push("Dgame".into()), StopScan::Stopped("".into()));
    }

    #[test]
    fn false_start_is_released_once_it_cannot_match() {
        let mut m = StopMatcher::new(vec!["END".into()]);
        assert_eq!(m.push("EN".into()), StopScan::Release(String::new()));
        assert_eq!(m.push("x".into()), StopScan::Release("ENx".into()));
        assert_eq!(m.flush(), "");
    }

    #[test]
    fn stop_inside_a_piece_cuts_just_before_it() {
        let mut m = StopMatcher::new(vec!["\n\n".into(), "THE END".into()]);
        assert_eq!(
            m.push("once upon".into()),
            StopScan::Release("once upon".into())
        );
        assert_eq!(
            m.push(" a time\n\nmore".into()),
            StopScan::Stopped(" a time".into())
        );
    }

    #[test]
    fn earliest_of_several_stops_wins() {
        let mut m = StopMatcher::new(vec!["bc".into(), "ab".into()]);
        assert_eq!(m.push("xabc".into()), StopScan::Stopped("x".into()));
    }

    #[test]
    fn held_text_is_flushed_at_the_end() {
        let mut m = StopMatcher::new(vec!["STOP".into()]);
        assert_eq!(m.push("go ST".into()), StopScan::Release("go ".into()));
        assert_eq!(m.flush(), "ST");
    }

    #[test]
    fn multibyte_stop_strings_hold_on_char_boundaries() {
        let mut m = StopMatcher::new(vec!["€€".into()]);
        assert_eq!(m.push("a€".into()), StopScan::Release("a".into()));
        assert_eq!(m.push("b".into()), StopScan::Release("€b".into()));
        assert_eq!(m.push("€€".into()), StopScan::Stopped(String::new()));
    }

    #[test]
    fn no_stops_releases_immediately() {
        let mut m = StopMatcher::new(vec![]);
        assert_eq!(m.push("abc".into()), StopScan::Release("abc".into()));
    }

    #[test]
    fn changing_stops_rescans_held_text() {
        let mut m = StopMatcher::new(vec!["xyz".into()]);
        assert_eq!(m.push("ab xy".into()), StopScan::Release("ab ".into()));
        assert_eq!(
            m.set_stops(vec!["q".into()]),
            StopScan::Release("xy".into())
        );
        let mut m = StopMatcher::new(vec!["xyz".into()]);
        m.push("ab xy".into());
        assert_eq!(m.set_stops(vec!["y".into()]), StopScan::Stopped("x".into()));
    }
}
