//! Which place ran each conversation's latest turn, so that its next turn goes back there: that
//! place's prompt cache still holds the conversation (llama-server's slots do this inside one
//! machine; across machines nothing else does). A turn is known by a hash of its messages
//! (their images and clips too: a cache keyed on them holds only the same ones); the
//! next turn's messages are those, the answer and the new user message, so dropping the new
//! messages and the answer finds it. A turn is known with its caller's cache owner: another
//! caller's copy of the conversation is not sent after a cache it may not read (where it went
//! would tell it who holds what). Bounded: the oldest conversations are forgotten first.

use std::collections::{HashMap, VecDeque};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Mutex, PoisonError};

use hearth_engine::CacheOwner;
use hearth_protocol::ChatMessage;

use crate::placement::Provider;

/// Conversations remembered.
const CAPACITY: usize = 4096;

#[derive(Debug, Default)]
pub(crate) struct Affinity {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    places: HashMap<u64, Provider>,
    order: VecDeque<u64>,
}

fn hash(owner: CacheOwner, messages: &[ChatMessage]) -> u64 {
    let mut h = DefaultHasher::new();
    owner.hash(&mut h);
    for m in messages {
        m.role.hash(&mut h);
        m.content.hash(&mut h);
        for image in &m.images {
            image.0.hash(&mut h);
        }
        for clip in &m.audio {
            clip.0.hash(&mut h);
        }
    }
    h.finish()
}

/// The turn before this one: the messages without the trailing new ones and the answer before
/// them; none when there was no earlier answer.
fn previous(messages: &[ChatMessage]) -> Option<&[ChatMessage]> {
    let answer = messages.iter().rposition(|m| m.role == "assistant")?;
    (answer > 0).then(|| &messages[..answer])
}

impl Affinity {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Where `owner`'s conversation's previous turn ran, if it is remembered.
    pub(crate) fn preferred(
        &self,
        owner: CacheOwner,
        messages: &[ChatMessage],
    ) -> Option<Provider> {
        let key = hash(owner, previous(messages)?);
        self.lock().places.get(&key).copied()
    }

    /// `owner`'s turn runs at `place`.
    pub(crate) fn remember(&self, owner: CacheOwner, messages: &[ChatMessage], place: Provider) {
        let key = hash(owner, messages);
        let mut inner = self.lock();
        if inner.places.insert(key, place).is_none() {
            inner.order.push_back(key);
            if inner.order.len() > CAPACITY {
                if let Some(old) = inner.order.pop_front() {
                    inner.places.remove(&old);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hearth_hub::WorkerId;

    const O: CacheOwner = CacheOwner::NODE;

    fn msg(role: &str, content: &str) -> ChatMessage {
        ChatMessage::new(role, content)
    }

    #[test]
    fn the_next_turn_finds_where_the_last_one_ran() {
        let a = Affinity::default();
        let turn1 = vec![msg("system", "s"), msg("user", "hi")];
        assert_eq!(
            a.preferred(O, &turn1),
            None,
            "a first turn has no previous one"
        );
        a.remember(O, &turn1, Provider::Worker(WorkerId(7)));
        let mut turn2 = turn1.clone();
        turn2.push(msg("assistant", "hello"));
        turn2.push(msg("user", "more"));
        assert_eq!(a.preferred(O, &turn2), Some(Provider::Worker(WorkerId(7))));
        a.remember(O, &turn2, Provider::Local);
        let mut turn3 = turn2.clone();
        turn3.push(msg("assistant", "sure"));
        turn3.push(msg("user", "again"));
        assert_eq!(a.preferred(O, &turn3), Some(Provider::Local));
        // Another conversation, or an edited history, is not this one.
        let mut edited = turn2.clone();
        edited[1] = msg("user", "hey");
        assert_eq!(a.preferred(O, &edited), None);
        // Nor is the same text about another picture or clip.
        let mut pictured = turn1.clone();
        pictured[1].images = vec![hearth_protocol::media::Image(vec![1, 2, 3])];
        a.remember(O, &pictured, Provider::Worker(WorkerId(9)));
        let next = |first: &[ChatMessage]| {
            let mut t = first.to_vec();
            t.push(msg("assistant", "a picture"));
            t.push(msg("user", "more"));
            t
        };
        assert_eq!(
            a.preferred(O, &next(&pictured)),
            Some(Provider::Worker(WorkerId(9)))
        );
        let mut other = pictured.clone();
        other[1].images = vec![hearth_protocol::media::Image(vec![4, 5, 6])];
        assert_eq!(a.preferred(O, &next(&other)), None);
        // Nor is the same conversation of another caller.
        let b = CacheOwner::caller("key b");
        assert_eq!(a.preferred(b, &turn3), None);
        let mut heard = turn1.clone();
        heard[1].audio = vec![hearth_protocol::audio::Audio(vec![7])];
        assert_eq!(a.preferred(O, &next(&heard)), None);
    }

    #[test]
    fn the_oldest_conversations_are_forgotten() {
        let a = Affinity::default();
        let turn = |i: usize| vec![msg("user", &i.to_string())];
        let next = |i: usize| {
            let mut t = turn(i);
            t.push(msg("assistant", "a"));
            t.push(msg("user", "b"));
            t
        };
        for i in 0..=CAPACITY {
            a.remember(O, &turn(i), Provider::Local);
        }
        assert_eq!(a.preferred(O, &next(0)), None);
        assert_eq!(a.preferred(O, &next(CAPACITY)), Some(Provider::Local));
        assert_eq!(a.lock().places.len(), CAPACITY);
    }
}
