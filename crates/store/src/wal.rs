//! A look at `hearth.db-wal` before SQLite opens the database: SQLite replays the log's frames
//! up to the first one whose checksum fails and silently drops the rest, so a log damaged in
//! the middle would start the node on older data. Read from SQLite's documented WAL format
//! (a 32-byte header, then frames of a 24-byte header and a page, with cumulative checksums).

use std::path::Path;

const HEADER: usize = 32;
const FRAME_HEADER: usize = 24;
/// The header's magic numbers: checksums over little-endian words, or big-endian ones.
const MAGIC_LE: u32 = 0x377f_0682;
const MAGIC_BE: u32 = 0x377f_0683;

/// What is in a log whose frames do not all check: the transactions after the damage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Damage {
    /// The first frame (counted from 1) whose checksum fails.
    pub frame: usize,
    /// Committed transactions after it that SQLite would drop.
    pub commits_lost: usize,
}

/// `Some` when the log at `path` holds committed transactions after a frame that fails its
/// checksum. A log cut short at its end (a crash mid-write) or absent is not damage.
pub(crate) fn damage(path: &Path) -> Option<Damage> {
    let bytes = std::fs::read(path).ok()?;
    check(&bytes)
}

fn word(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// SQLite's WAL checksum over `data` (a whole number of 8-byte pairs), from `(s0, s1)`.
fn checksum(data: &[u8], big_endian: bool, (mut s0, mut s1): (u32, u32)) -> (u32, u32) {
    for pair in data.chunks_exact(8) {
        let w = |i: usize| {
            let b = [pair[i], pair[i + 1], pair[i + 2], pair[i + 3]];
            if big_endian {
                u32::from_be_bytes(b)
            } else {
                u32::from_le_bytes(b)
            }
        };
        s0 = s0.wrapping_add(w(0)).wrapping_add(s1);
        s1 = s1.wrapping_add(w(4)).wrapping_add(s0);
    }
    (s0, s1)
}

fn check(b: &[u8]) -> Option<Damage> {
    if b.len() < HEADER {
        return None;
    }
    let big_endian = match word(b, 0) {
        MAGIC_LE => false,
        MAGIC_BE => true,
        _ => return None,
    };
    let page = word(b, 8) as usize;
    if !(512..=65536).contains(&page) || !page.is_power_of_two() {
        return None;
    }
    let salts = (word(b, 16), word(b, 20));
    let mut sum = checksum(&b[..24], big_endian, (0, 0));
    if sum != (word(b, 24), word(b, 28)) {
        // A header that does not check: SQLite ignores the whole log; so is a log never
        // written past its header. Either way there is nothing to tell frames apart by.
        return None;
    }
    let frame_len = FRAME_HEADER + page;
    let mut first_bad = None;
    let mut commits_lost = 0;
    for (i, f) in b[HEADER..].chunks_exact(frame_len).enumerate() {
        if (word(f, 8), word(f, 12)) != salts {
            // Left from before the log was last restarted: the log's live part ended.
            break;
        }
        let stored = (word(f, 16), word(f, 20));
        let computed = checksum(
            &f[FRAME_HEADER..],
            big_endian,
            checksum(&f[..8], big_endian, sum),
        );
        let commit = word(f, 4) != 0;
        if computed != stored && first_bad.is_none() {
            first_bad = Some(i + 1);
        }
        if first_bad.is_some() && computed == stored && commit {
            commits_lost += 1;
        }
        // Go on from what the frame says its checksum is: the frames after a damaged page
        // still check against it, which is how the damage is told from a cut-off end.
        sum = stored;
    }
    first_bad.filter(|_| commits_lost > 0).map(|frame| Damage {
        frame,
        commits_lost,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A log of `frames` frames of 512-byte pages, each a commit, with real checksums.
    fn log(frames: usize, big_endian: bool) -> Vec<u8> {
        let mut b = Vec::new();
        let magic = if big_endian { MAGIC_BE } else { MAGIC_LE };
        for w in [magic, 3_007_000, 512, 0, 0x1111_1111, 0x2222_2222] {
            b.extend_from_slice(&w.to_be_bytes());
        }
        let mut sum = checksum(&b, big_endian, (0, 0));
        b.extend_from_slice(&sum.0.to_be_bytes());
        b.extend_from_slice(&sum.1.to_be_bytes());
        for n in 0..frames {
            let mut head = Vec::new();
            for w in [n as u32 + 1, n as u32 + 1, 0x1111_1111, 0x2222_2222] {
                head.extend_from_slice(&w.to_be_bytes());
            }
            let page: Vec<u8> = (0..512).map(|i| (i * 7 + n) as u8).collect();
            sum = checksum(&page, big_endian, checksum(&head[..8], big_endian, sum));
            head.extend_from_slice(&sum.0.to_be_bytes());
            head.extend_from_slice(&sum.1.to_be_bytes());
            b.extend_from_slice(&head);
            b.extend_from_slice(&page);
        }
        b
    }

    #[test]
    fn a_whole_log_or_one_cut_at_its_end_is_not_damage() {
        for be in [false, true] {
            let whole = log(5, be);
            assert_eq!(check(&whole), None);
            assert_eq!(check(&whole[..whole.len() - 100]), None);
            // The last frame's page torn: only the end is lost, as a crash mid-write leaves it.
            let mut torn = whole.clone();
            let last = torn.len() - 10;
            torn[last] ^= 0xff;
            assert_eq!(check(&torn), None);
        }
    }

    #[test]
    fn a_page_damaged_in_the_middle_is_damage_that_names_what_would_be_lost() {
        for be in [false, true] {
            let mut b = log(5, be);
            // A byte of frame 2's page.
            b[HEADER + (FRAME_HEADER + 512) + FRAME_HEADER + 40] ^= 0x01;
            assert_eq!(
                check(&b),
                Some(Damage {
                    frame: 2,
                    commits_lost: 3
                })
            );
        }
    }
}
