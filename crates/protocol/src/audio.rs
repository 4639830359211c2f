//! Audio clips a message carries: their file's bytes (base64 on every wire), the checks every
//! door makes (WAV or MP3, by their first bytes; size; count), and their decoding (symphonia, in
//! Rust) to mono samples at the projector's rate, the length checked as it decodes.

use base64::Engine as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use symphonia::core::audio::SampleBuffer;
use symphonia::core::codecs::{DecoderOptions, CODEC_TYPE_NULL};
use symphonia::core::errors::Error as DecodeError;
use symphonia::core::formats::FormatOptions;
use symphonia::core::io::MediaSourceStream;
use symphonia::core::meta::MetadataOptions;
use symphonia::core::probe::Hint;

/// The most bytes one clip may have, encoded: one fits an HTTP body
/// ([`crate::limits::MAX_HTTP_BODY_BYTES`]) in base64. About 4 minutes of 16 kHz 16-bit mono
/// WAV, 47 seconds of CD audio, far more of MP3: for WAV it binds before the length does.
pub const MAX_AUDIO_BYTES: usize = 8 << 20;
/// The most clips one request may carry: each is 750 tokens a started half-minute.
pub const MAX_CLIPS: usize = 4;
/// The longest clip, in seconds, once decoded.
pub const MAX_AUDIO_SECONDS: u32 = 300;

/// One clip, as its file's bytes. On the wire (between nodes, in JSON) it is base64.
#[derive(Clone, PartialEq, Eq)]
pub struct Audio(pub Vec<u8>);

impl std::fmt::Debug for Audio {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Audio({} bytes)", self.0.len())
    }
}

/// Why a clip was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AudioError {
    #[error("the audio is not valid base64: {0}")]
    Base64(String),
    #[error("the audio is empty")]
    Empty,
    #[error("the audio has {bytes} bytes; the limit is {limit} bytes ({} MiB)", MAX_AUDIO_BYTES >> 20)]
    TooLarge { bytes: usize, limit: usize },
    #[error("{count} audio clips in one request; the limit is {limit}")]
    TooMany { count: usize, limit: usize },
    #[error("not audio this node reads: WAV and MP3 are (the file's first bytes are neither)")]
    UnknownFormat,
    #[error("the audio says it is {said} but its bytes are {found}")]
    NotWhatItSays { said: String, found: String },
    #[error("damaged {format} audio: {why}")]
    Damaged { format: String, why: String },
    #[error("{format} audio this node cannot decode: {why} (PCM WAV and MP3 are read)")]
    Unsupported { format: String, why: String },
    #[error("the audio is longer than {MAX_AUDIO_SECONDS} seconds")]
    TooLong,
}

/// The formats read, by their first bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AudioFormat {
    Wav,
    Mp3,
}

impl AudioFormat {
    pub fn name(self) -> &'static str {
        match self {
            Self::Wav => "wav",
            Self::Mp3 => "mp3",
        }
    }
}

impl Audio {
    /// A clip from base64 (standard alphabet, padding optional, line breaks allowed).
    pub fn from_base64(text: &str) -> Result<Self, AudioError> {
        let payload: String = text.split_whitespace().collect();
        // Decoded, base64 is 3/4 of its length: a payload far over the limit is not decoded.
        if payload.len() / 4 * 3 > MAX_AUDIO_BYTES + 3 {
            return Err(AudioError::TooLarge {
                bytes: payload.len() / 4 * 3,
                limit: MAX_AUDIO_BYTES,
            });
        }
        let bytes = base64::engine::general_purpose::STANDARD_NO_PAD
            .decode(payload.trim_end_matches('='))
            .map_err(|e| AudioError::Base64(e.to_string()))?;
        if bytes.is_empty() {
            return Err(AudioError::Empty);
        }
        if bytes.len() > MAX_AUDIO_BYTES {
            return Err(AudioError::TooLarge {
                bytes: bytes.len(),
                limit: MAX_AUDIO_BYTES,
            });
        }
        let audio = Self(bytes);
        audio.probe()?;
        Ok(audio)
    }

    /// Its format, from its first bytes: what every door checks as it reads a request (the
    /// samples are decoded where the model runs).
    pub fn probe(&self) -> Result<AudioFormat, AudioError> {
        let b = &self.0;
        if b.len() >= 12 && &b[..4] == b"RIFF" && &b[8..12] == b"WAVE" {
            return Ok(AudioFormat::Wav);
        }
        // An ID3 tag, or an MPEG audio frame's sync word (11 bits) with layer III.
        let frame = b.len() >= 2 && b[0] == 0xFF && b[1] & 0xE0 == 0xE0 && b[1] & 0x06 == 0x02;
        if b.starts_with(b"ID3") || frame {
            return Ok(AudioFormat::Mp3);
        }
        Err(AudioError::UnknownFormat)
    }

    /// Its samples, mixed to one channel and resampled to `rate` Hz, at most
    /// [`MAX_AUDIO_SECONDS`] long.
    pub fn decode_mono(&self, rate: u32) -> Result<Vec<f32>, AudioError> {
        let format = self.probe()?;
        let damaged = |why: &dyn std::fmt::Display| AudioError::Damaged {
            format: format.name().to_uppercase(),
            why: why.to_string(),
        };
        let source = MediaSourceStream::new(
            Box::new(std::io::Cursor::new(self.0.clone())),
            Default::default(),
        );
        let mut hint = Hint::new();
        hint.with_extension(format.name());
        let probed = symphonia::default::get_probe()
            .format(
                &hint,
                source,
                &FormatOptions::default(),
                &MetadataOptions::default(),
            )
            .map_err(|e| damaged(&e))?;
        let mut reader = probed.format;
        let track = reader
            .tracks()
            .iter()
            .find(|t| t.codec_params.codec != CODEC_TYPE_NULL)
            .ok_or_else(|| damaged(&"no audio track"))?;
        let (track_id, params) = (track.id, track.codec_params.clone());
        let source_rate = params
            .sample_rate
            .filter(|r| *r > 0)
            .ok_or_else(|| damaged(&"no sample rate"))?;
        // Counted as samples arrive: the frame count a header claims is not trusted (a WAV
        // written to a pipe claims the largest length there is).
        let most = u64::from(MAX_AUDIO_SECONDS) * u64::from(source_rate);
        let mut decoder = symphonia::default::get_codecs()
            .make(&params, &DecoderOptions::default())
            .map_err(|e| AudioError::Unsupported {
                format: format.name().to_uppercase(),
                why: e.to_string(),
            })?;
        let mut mono: Vec<f32> = Vec::new();
        loop {
            let packet = match reader.next_packet() {
                Ok(p) => p,
                Err(DecodeError::IoError(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                    break
                }
                Err(e) => return Err(damaged(&e)),
            };
            if packet.track_id() != track_id {
                continue;
            }
            let decoded = match decoder.decode(&packet) {
                Ok(d) => d,
                // A damaged frame in a stream is skipped, as players do.
                Err(DecodeError::DecodeError(_)) => continue,
                Err(e) => return Err(damaged(&e)),
            };
            let spec = *decoded.spec();
            let channels = spec.channels.count().max(1);
            let mut buf = SampleBuffer::<f32>::new(decoded.capacity() as u64, spec);
            buf.copy_interleaved_ref(decoded);
            for frame in buf.samples().chunks(channels) {
                mono.push(frame.iter().sum::<f32>() / channels as f32);
            }
            if mono.len() as u64 > most {
                return Err(AudioError::TooLong);
            }
        }
        if mono.is_empty() {
            return Err(damaged(&"no samples"));
        }
        Ok(resample(&mono, source_rate, rate))
    }
}

/// `samples` at `from` Hz, at `to` Hz. Going down, each output sample is the mean of the input
/// samples of its span (a box filter: what lies above the new rate's half is damped instead of
/// folding back into the speech band); going up, it is interpolated between its neighbours.
/// Written here, not a resampling crate's: a dozen lines, no state between clips, and a speech
/// encoder's mel filters look at nothing finer.
fn resample(samples: &[f32], from: u32, to: u32) -> Vec<f32> {
    if from == to || samples.len() < 2 {
        return samples.to_vec();
    }
    let out_len = (samples.len() as u64 * u64::from(to) / u64::from(from)).max(1) as usize;
    let step = f64::from(from) / f64::from(to);
    let last = samples.len() - 1;
    (0..out_len)
        .map(|i| {
            let t = i as f64 * step;
            let at = (t as usize).min(last);
            if step > 1.0 {
                let end = (((i + 1) as f64 * step) as usize).clamp(at + 1, samples.len());
                let span = &samples[at..end];
                return span.iter().sum::<f32>() / span.len() as f32;
            }
            let next = (at + 1).min(last);
            let frac = (t - at as f64) as f32;
            samples[at] + (samples[next] - samples[at]) * frac
        })
        .collect()
}

/// A request's clip count against [`MAX_CLIPS`].
pub fn check_count(count: usize) -> Result<(), AudioError> {
    if count > MAX_CLIPS {
        return Err(AudioError::TooMany {
            count,
            limit: MAX_CLIPS,
        });
    }
    Ok(())
}

impl Serialize for Audio {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(&self.0))
    }
}

impl<'de> Deserialize<'de> for Audio {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Self::from_base64(&text).map_err(serde::de::Error::custom)
    }
}

/// A WAV file (16-bit PCM) of `samples` at `rate` Hz and `channels` channels, interleaved:
/// for the tests of every part that reads audio.
pub fn wav(samples: &[i16], rate: u32, channels: u16) -> Vec<u8> {
    let data = (samples.len() * 2) as u32;
    let mut out = Vec::with_capacity(44 + data as usize);
    out.extend_from_slice(b"RIFF");
    out.extend_from_slice(&(36 + data).to_le_bytes());
    out.extend_from_slice(b"WAVEfmt ");
    out.extend_from_slice(&16u32.to_le_bytes());
    out.extend_from_slice(&1u16.to_le_bytes());
    out.extend_from_slice(&channels.to_le_bytes());
    out.extend_from_slice(&rate.to_le_bytes());
    out.extend_from_slice(&(rate * u32::from(channels) * 2).to_le_bytes());
    out.extend_from_slice(&(channels * 2).to_le_bytes());
    out.extend_from_slice(&16u16.to_le_bytes());
    out.extend_from_slice(b"data");
    out.extend_from_slice(&data.to_le_bytes());
    for s in samples {
        out.extend_from_slice(&s.to_le_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tone(hz: f32, rate: u32, seconds: f32) -> Vec<i16> {
        (0..(rate as f32 * seconds) as usize)
            .map(|i| ((i as f32 * hz * std::f32::consts::TAU / rate as f32).sin() * 12000.0) as i16)
            .collect()
    }

    #[test]
    fn a_wav_is_read_mixed_down_and_resampled() {
        // Stereo at 48 kHz: left a tone, right its opposite: they cancel to silence.
        let left = tone(440.0, 48_000, 0.5);
        let stereo: Vec<i16> = left.iter().flat_map(|s| [*s, -*s]).collect();
        let clip = Audio(wav(&stereo, 48_000, 2));
        assert_eq!(clip.probe(), Ok(AudioFormat::Wav));
        let mono = clip.decode_mono(16_000).unwrap();
        assert_eq!(mono.len(), 8_000);
        assert!(mono.iter().all(|s| s.abs() < 1e-3));
        let mono = Audio(wav(&left, 48_000, 1)).decode_mono(16_000).unwrap();
        let peak = mono.iter().fold(0f32, |m, s| m.max(s.abs()));
        assert!((0.3..0.4).contains(&peak), "{peak}");
        let back = Audio::from_base64(&base64::engine::general_purpose::STANDARD.encode(&clip.0));
        assert_eq!(back, Ok(clip));
    }

    #[test]
    fn going_down_a_tone_above_the_new_band_is_damped_not_folded_back() {
        // 12 kHz at 48 kHz: above 16 kHz's 8 kHz limit. Linear picking would fold it to 4 kHz
        // at full strength.
        let high = tone(12_000.0, 48_000, 0.1);
        let mono = Audio(wav(&high, 48_000, 1)).decode_mono(16_000).unwrap();
        let peak = mono.iter().fold(0f32, |m, s| m.max(s.abs()));
        assert!(peak < 0.15, "{peak}");
        // Going up, a tone keeps its strength.
        let low = Audio(wav(&tone(440.0, 8_000, 0.1), 8_000, 1))
            .decode_mono(16_000)
            .unwrap();
        assert_eq!(low.len(), 1_600);
        let peak = low.iter().fold(0f32, |m, s| m.max(s.abs()));
        assert!((0.3..0.4).contains(&peak), "{peak}");
    }

    #[test]
    fn a_wav_claiming_the_longest_length_is_read_for_what_it_holds() {
        let mut streamed = wav(&tone(440.0, 16_000, 0.5), 16_000, 1);
        streamed[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        streamed[40..44].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(
            Audio(streamed).decode_mono(16_000).map(|s| s.len()),
            Ok(8_000)
        );
    }

    #[test]
    fn what_is_not_wav_or_mp3_or_too_long_is_refused() {
        let pdf = base64::engine::general_purpose::STANDARD.encode(b"%PDF-1.4\n");
        assert_eq!(Audio::from_base64(&pdf), Err(AudioError::UnknownFormat));
        assert_eq!(Audio::from_base64(""), Err(AudioError::Empty));
        assert!(matches!(
            Audio::from_base64("not base64!"),
            Err(AudioError::Base64(_))
        ));
        // A WAV cut after its header: no samples.
        let mut cut = wav(&tone(440.0, 16_000, 0.1), 16_000, 1);
        cut.truncate(44);
        assert!(matches!(
            Audio(cut).decode_mono(16_000),
            Err(AudioError::Damaged { .. })
        ));
        let long = wav(
            &vec![0i16; 8_000 * (MAX_AUDIO_SECONDS as usize + 1)],
            8_000,
            1,
        );
        assert_eq!(Audio(long).decode_mono(16_000), Err(AudioError::TooLong));
        assert!(check_count(MAX_CLIPS).is_ok());
        assert!(check_count(MAX_CLIPS + 1).is_err());
    }
}
