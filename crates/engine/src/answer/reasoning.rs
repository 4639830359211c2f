//! A model's thinking read apart from its answer: text between `<think>` and `</think>` at the
//! start of the output (DeepSeek R1, Qwen 3, SmolLM 3 and the models trained after them),
//! split as it streams, holding back only what could still be the start of a marker.

pub(super) const OPEN: &str = "<think>";
pub(super) const CLOSE: &str = "</think>";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Nothing but whitespace (or part of `<think>`) yet.
    Start,
    Thinking,
    Answering,
}

/// Splits streamed text into thinking and answer.
#[derive(Debug)]
pub(super) struct Thinking {
    state: State,
    held: String,
    /// After `</think>`: the whitespace before the answer is dropped.
    trim: bool,
}

/// What a piece of output is (a protocol type: the doors' stream writers take it).
pub use hearth_protocol::generation::Piece;

impl Thinking {
    /// `opened`: the prompt opened the block already, so the text starts inside it.
    pub(super) fn new(opened: bool) -> Self {
        Self {
            state: if opened {
                State::Thinking
            } else {
                State::Start
            },
            held: String::new(),
            trim: false,
        }
    }

    pub(super) fn push(&mut self, text: &str, out: &mut Vec<Piece>) {
        self.held.push_str(text);
        loop {
            match self.state {
                State::Start => {
                    let t = self.held.trim_start();
                    if let Some(rest) = t.strip_prefix(OPEN) {
                        self.held = rest.to_owned();
                        self.state = State::Thinking;
                    } else if OPEN.starts_with(t) {
                        return;
                    } else {
                        self.state = State::Answering;
                    }
                }
                State::Thinking => {
                    if let Some(at) = self.held.find(CLOSE) {
                        let thought = self.held[..at].to_owned();
                        let rest = self.held[at + CLOSE.len()..].to_owned();
                        emit(out, Piece::Reasoning(thought));
                        self.held = rest;
                        self.state = State::Answering;
                        self.trim = true;
                    } else {
                        let keep = partial_suffix(&self.held, CLOSE);
                        let ready = self.held[..self.held.len() - keep].to_owned();
                        self.held.drain(..ready.len());
                        emit(out, Piece::Reasoning(ready));
                        return;
                    }
                }
                State::Answering => {
                    if self.trim {
                        self.held = self.held.trim_start().to_owned();
                        self.trim = self.held.is_empty();
                    }
                    emit(out, Piece::Content(std::mem::take(&mut self.held)));
                    return;
                }
            }
        }
    }

    /// What is still held: unfinished thinking stays thinking.
    pub(super) fn finish(self, out: &mut Vec<Piece>) {
        match self.state {
            State::Thinking => emit(out, Piece::Reasoning(self.held)),
            State::Start | State::Answering => emit(out, Piece::Content(self.held)),
        }
    }
}

fn emit(out: &mut Vec<Piece>, piece: Piece) {
    let empty = match &piece {
        Piece::Reasoning(t) | Piece::Content(t) => t.is_empty(),
    };
    if !empty {
        out.push(piece);
    }
}

/// The length of the longest end of `text` that begins `marker` (and is not all of it).
pub(super) fn partial_suffix(text: &str, marker: &str) -> usize {
    (1..marker.len().min(text.len() + 1))
        .rev()
        .find(|&n| {
            text.is_char_boundary(text.len() - n) && marker.starts_with(&text[text.len() - n..])
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(pieces: &[&str]) -> Vec<Piece> {
        split_from(false, pieces)
    }

    fn split_from(opened: bool, pieces: &[&str]) -> Vec<Piece> {
        let mut t = Thinking::new(opened);
        let mut out = Vec::new();
        for p in pieces {
            t.push(p, &mut out);
        }
        t.finish(&mut out);
        // Merge neighbours of one kind, as a reader would see them.
        let mut merged: Vec<Piece> = Vec::new();
        for p in out {
            match (merged.last_mut(), p) {
                (Some(Piece::Reasoning(a)), Piece::Reasoning(b)) => a.push_str(&b),
                (Some(Piece::Content(a)), Piece::Content(b)) => a.push_str(&b),
                (_, p) => merged.push(p),
            }
        }
        merged
    }

    #[test]
    fn thinking_is_split_however_the_markers_are_cut() {
        let want = vec![
            Piece::Reasoning("I should greet.".into()),
            Piece::Content("Hello!".into()),
        ];
        assert_eq!(split(&["<think>I should greet.</think>\n\nHello!"]), want);
        assert_eq!(
            split(&[
                "\n<th",
                "ink>I should",
                " greet.</th",
                "ink>",
                "\n\nHel",
                "lo!"
            ]),
            want
        );
        let text = "<think>I should greet.</think>\n\nHello!";
        for cut in 1..text.len() {
            assert_eq!(split(&[&text[..cut], &text[cut..]]), want, "cut at {cut}");
        }
    }

    #[test]
    fn a_block_the_prompt_opened_ends_at_its_close() {
        assert_eq!(
            split_from(true, &["\nPlan.", "</think>", "\n\nHi"]),
            vec![
                Piece::Reasoning("\nPlan.".into()),
                Piece::Content("Hi".into())
            ]
        );
    }

    #[test]
    fn answers_without_thinking_pass_through() {
        assert_eq!(
            split(&["Hello ", "<think> there"]),
            vec![Piece::Content("Hello <think> there".into())]
        );
        assert_eq!(split(&["<thi"]), vec![Piece::Content("<thi".into())]);
        assert_eq!(
            split(&["<think>still going"]),
            vec![Piece::Reasoning("still going".into())]
        );
    }
}
