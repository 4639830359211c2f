//! Images and audio into the model: the projector that turns pictures and clips into the
//! model's embeddings (llama.cpp's multimodal library, mtmd, over an `mmproj` GGUF found beside
//! the model), files decoded in Rust under limits (`hearth_protocol::media`, `::audio`), and a
//! prompt cut into text tokens and media chunks, which the scheduler evaluates into the slot's
//! sequence between two batched steps.
//!
//! A chunk's place in the token list holds stand-in ids derived from its file's hash
//! (negative: never a vocabulary id), so that the prompt cache, which keys on token prefixes,
//! finds a resent image or clip as it finds resent text, and never takes one for another.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use hearth_protocol::audio::Audio;
use hearth_protocol::media::{Image, MARKER_AS_TEXT, MEDIA_MARKER};
use hearth_protocol::ChatMessage;
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::mtmd::{
    MtmdBitmap, MtmdContext, MtmdContextParams, MtmdInputChunk, MtmdInputChunkType, MtmdInputText,
};
use llama_cpp_2::token::LlamaToken;
use sha2::{Digest, Sha256};

/// What a model's projector takes in, as its header says.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Senses {
    /// It reads images.
    pub vision: bool,
    /// It hears audio clips.
    pub audio: bool,
}

/// What the projector beside `model` ([`find_projector`]) takes in, as its header says (one
/// that does not say is an older vision projector, which hears nothing): what a model not
/// loaded is marked by.
pub fn projector_senses(model: &Path) -> Senses {
    find_projector(model)
        .and_then(|p| crate::gguf::read(&p).ok())
        .map_or_else(Senses::default, |g| Senses {
            vision: g.has_vision_encoder != Some(false),
            audio: g.has_audio_encoder == Some(true),
        })
}

/// Whether the projector beside `model` reads images ([`projector_senses`]).
pub fn projector_sees(model: &Path) -> bool {
    projector_senses(model).vision
}

/// What the projector at `path` takes beside its model: its weights, loaded whole, and the
/// image encoder's buffers (about as much again, for the largest image it takes).
pub fn projector_bytes(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len().saturating_mul(2))
}

/// Projectors named for models ([`name_projector`]), by the model file's absolute path.
static NAMED: std::sync::LazyLock<std::sync::Mutex<std::collections::HashMap<PathBuf, PathBuf>>> =
    std::sync::LazyLock::new(Default::default);

/// `path` absolute, its `.` and `..` taken away by their names alone (links are not followed:
/// a link to a model is another model file here, as the models folder lists it).
fn named_key(path: &Path) -> PathBuf {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut out = PathBuf::new();
    for part in absolute.components() {
        match part {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// Name `projector` as `model`'s (the node's `--projector`, for a projector kept elsewhere or
/// named otherwise): [`find_projector`] finds it first, for this process's life.
pub fn name_projector(model: &Path, projector: PathBuf) {
    NAMED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .insert(named_key(model), named_key(&projector));
}

/// The projector file for a model: the one named for it ([`name_projector`]), else
/// `mmproj-<model file name>` beside it (LM Studio's and Jan's layout, and Hearth's
/// downloads), else the one projector (`mmproj` in its name) of a folder that holds only this
/// model (a download of one repository; a split model's shards are one model there), never one
/// named for another file of the folder.
pub fn find_projector(model: &Path) -> Option<PathBuf> {
    let named = NAMED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .get(&named_key(model))
        .cloned();
    if named.is_some() {
        return named;
    }
    let dir = model.parent()?;
    let name = model.file_name()?.to_str()?;
    let beside = dir.join(format!("mmproj-{name}"));
    if beside.is_file() {
        return Some(beside);
    }
    let mut projectors = Vec::new();
    let mut models = std::collections::HashSet::new();
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let file = entry.file_name();
        let Some(file) = file.to_str() else { continue };
        let lower = file.to_ascii_lowercase();
        if !lower.ends_with(".gguf") {
            continue;
        }
        if lower.contains("mmproj") {
            let for_another = file
                .strip_prefix("mmproj-")
                .is_some_and(|other| other != name && dir.join(other).exists());
            if !for_another {
                projectors.push(entry.path());
            }
        } else {
            let model = hearth_protocol::ids::split_shard(file).map_or(file, |(stem, _, _)| stem);
            models.insert(model.to_owned());
        }
    }
    (models.len() == 1 && projectors.len() == 1).then(|| projectors.remove(0))
}

/// Why an image could not go into the prompt.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MediaError {
    #[error("image {index}: {why}")]
    Image { index: usize, why: String },
    #[error("audio clip {index}: {why}")]
    Audio { index: usize, why: String },
    #[error(
        "the prompt holds {markers} media places ({MEDIA_MARKER}) for {media} images and clips"
    )]
    Places { markers: usize, media: usize },
    #[error("the images and clips could not be prepared for the model: {0}")]
    Prepare(String),
    #[error(transparent)]
    Limit(#[from] hearth_protocol::media::ImageError),
    #[error(transparent)]
    AudioLimit(#[from] hearth_protocol::audio::AudioError),
}

/// One image or audio clip of a prompt, in the order their markers stand in its text.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Media<'a> {
    Image(&'a Image),
    Audio(&'a Audio),
}

/// A model's projector, loaded once with it and shared by the request threads (which cut
/// prompts, several at once: mtmd's tokenizing is safe on a shared context) and the engine
/// thread (which evaluates images, alone): a read lock for the one, the write lock for the
/// other. Images are decoded and shrunk before the lock is taken (one large image held whole at
/// a time; the shrunk ones, at most 12 MiB each, until the prompt is cut), so a prompt holds it
/// for mtmd's own resize of pictures of at most 2,048 pixels a side.
pub(crate) struct Projector {
    // Declared before the model: dropped before it (mtmd keeps a pointer to it).
    ctx: RwLock<MtmdContext>,
    pub(crate) vision: bool,
    pub(crate) audio: bool,
    _model: Arc<LlamaModel>,
}

/// One image of a prompt: where its tokens start, how many, how many KV positions they take
/// (as many, but under M-RoPE), and the chunk that makes them.
pub(crate) struct MediaChunk {
    pub(crate) at: usize,
    pub(crate) len: usize,
    pub(crate) n_pos: usize,
    pub(crate) chunk: MtmdInputChunk<'static>,
}

/// A prompt with images: its token list (images as stand-in ids) and its image chunks.
pub(crate) struct Prepared {
    pub(crate) tokens: Vec<LlamaToken>,
    pub(crate) media: Vec<MediaChunk>,
}

impl Projector {
    /// Load `path` for `model`, on the GPU when the model is there.
    pub(crate) fn load(
        path: &Path,
        model: &Arc<LlamaModel>,
        on_gpu: bool,
        threads: i32,
    ) -> Result<Self, String> {
        let params = MtmdContextParams {
            use_gpu: on_gpu,
            print_timings: false,
            n_threads: threads,
            ..MtmdContextParams::default()
        };
        let path_text = path.to_str().ok_or("the projector's path is not UTF-8")?;
        let ctx = MtmdContext::init_from_file(path_text, model, &params).map_err(|e| {
            format!(
                "llama.cpp could not load the projector {} for this model: {e}",
                path.display()
            )
        })?;
        Ok(Self {
            vision: ctx.support_vision(),
            audio: ctx.support_audio(),
            ctx: RwLock::new(ctx),
            _model: model.clone(),
        })
    }

    /// Cut `text` (holding one [`MEDIA_MARKER`] per image or clip) and `media` into tokens and
    /// media chunks, as [`crate::model::Prompter::tokenize`] would tokenize the text alone.
    pub(crate) fn prepare(&self, text: &str, media: &[Media<'_>]) -> Result<Prepared, MediaError> {
        let markers = text.matches(MEDIA_MARKER).count();
        if markers != media.len() {
            return Err(MediaError::Places {
                markers,
                media: media.len(),
            });
        }
        let rate = {
            let ctx = self.ctx.read().unwrap_or_else(|p| p.into_inner());
            ctx.get_audio_sample_rate().unwrap_or(DEFAULT_AUDIO_RATE)
        };
        let (mut images, mut clips) = (0, 0);
        let mut bitmaps = Vec::with_capacity(media.len());
        for item in media {
            let (bitmap, bytes) = match item {
                Media::Image(image) => {
                    let index = images;
                    images += 1;
                    let why = |e: &dyn std::fmt::Display| MediaError::Image {
                        index,
                        why: e.to_string(),
                    };
                    let pixels = image.decode_within(MAX_SIDE).map_err(|e| why(&e))?;
                    let bitmap =
                        MtmdBitmap::from_image_data(pixels.width, pixels.height, &pixels.rgb)
                            .map_err(|e| why(&e))?;
                    (bitmap, &image.0)
                }
                Media::Audio(clip) => {
                    let index = clips;
                    clips += 1;
                    let why = |e: &dyn std::fmt::Display| MediaError::Audio {
                        index,
                        why: e.to_string(),
                    };
                    let samples = clip.decode_mono(rate).map_err(|e| why(&e))?;
                    let bitmap = MtmdBitmap::from_audio_data(&samples).map_err(|e| why(&e))?;
                    (bitmap, &clip.0)
                }
            };
            let mut bitmap = bitmap;
            // Its chunks carry its hash: one image (or clip) may be cut into several.
            let hash = hex(&Sha256::digest(bytes));
            bitmap
                .set_id(&hash)
                .map_err(|e| MediaError::Prepare(e.to_string()))?;
            bitmaps.push(bitmap);
        }
        let refs: Vec<&MtmdBitmap> = bitmaps.iter().collect();
        let input = MtmdInputText {
            text: text.to_owned(),
            add_special: true,
            parse_special: true,
        };
        let chunks = {
            let ctx = self.ctx.read().unwrap_or_else(|p| p.into_inner());
            ctx.tokenize(input, &refs)
                .map_err(|e| MediaError::Prepare(e.to_string()))?
        };
        let mut tokens = Vec::new();
        let mut media = Vec::new();
        // Each image's chunks so far, by its hash.
        let mut seen: std::collections::HashMap<String, usize> = Default::default();
        for i in 0..chunks.len() {
            let Some(chunk) = chunks.get(i) else { continue };
            match chunk.chunk_type() {
                MtmdInputChunkType::Text => {
                    tokens.extend_from_slice(chunk.text_tokens().unwrap_or(&[]));
                }
                _ => {
                    let id = chunk.id().ok_or_else(|| {
                        MediaError::Prepare("a media chunk without its file's id".into())
                    })?;
                    let nth = seen.entry(id.clone()).or_default();
                    let seed = Sha256::digest(format!("{id}/{nth}"));
                    *nth += 1;
                    let len = chunk.n_tokens();
                    let n_pos = usize::try_from(chunk.n_positions())
                        .ok()
                        .filter(|&n| n <= len)
                        .ok_or_else(|| {
                            MediaError::Prepare(format!(
                                "a media chunk of {len} tokens takes {} positions",
                                chunk.n_positions()
                            ))
                        })?;
                    let at = tokens.len();
                    tokens.extend(stand_ins(&seed, len));
                    let chunk = chunk
                        .copy()
                        .map_err(|e| MediaError::Prepare(e.to_string()))?;
                    media.push(MediaChunk {
                        at,
                        len,
                        n_pos,
                        chunk,
                    });
                }
            }
        }
        if media.last().is_some_and(|m| m.at + m.len == tokens.len()) {
            // Its logits would be the first token's: the scheduler samples only after text.
            return Err(MediaError::Prepare(
                "an image or clip cannot end the prompt: text must follow it".into(),
            ));
        }
        Ok(Prepared { tokens, media })
    }

    /// Evaluate `chunk` into `seq` from KV position `at`; the next position.
    pub(crate) fn eval(
        &self,
        chunk: &MediaChunk,
        at: i32,
        ctx: &mut LlamaContext<'_>,
        seq: i32,
        n_batch: u32,
    ) -> Result<usize, String> {
        let mut mtmd = self.ctx.write().unwrap_or_else(|p| p.into_inner());
        chunk
            .chunk
            .eval(&mut mtmd, ctx, at, seq, n_batch as i32, false)
            .map(|next| next.max(0) as usize)
            .map_err(|e| format!("the image or clip could not be evaluated: {e}"))
    }
}

/// The messages as the template renders them: each one's clips first, then its images where
/// its text holds their markers (a door put them there), else before its text, each as a
/// [`place`] that [`marked`] turns into a marker once rendered; the files' bytes stay out of
/// the template's context. With them, every image and clip in the order of their places.
pub(crate) fn placed(messages: &[ChatMessage]) -> (Vec<ChatMessage>, Vec<Media<'_>>) {
    let mut media = Vec::new();
    let placed = messages
        .iter()
        .map(|m| {
            // Not `m.clone()`: the files' bytes would be copied for nothing.
            let mut m2 = ChatMessage {
                role: m.role.clone(),
                content: m.content.clone(),
                tool_calls: m.tool_calls.clone(),
                tool_call_id: m.tool_call_id.clone(),
                name: m.name.clone(),
                images: Vec::new(),
                audio: Vec::new(),
            };
            if !m.images.is_empty() {
                m2.content = if m.content.contains(MEDIA_MARKER) {
                    m.content.replace(MEDIA_MARKER, place())
                } else {
                    format!("{}{}", place().repeat(m.images.len()), m.content)
                };
            }
            if !m.audio.is_empty() {
                m2.content = format!("{}{}", place().repeat(m.audio.len()), m2.content);
            }
            media.extend(m.audio.iter().map(Media::Audio));
            media.extend(m.images.iter().map(Media::Image));
            m2
        })
        .collect();
    (placed, media)
}

/// Where an image or clip stands in the messages the template renders: a name no request
/// holds (random for each run), so that only the places Hearth made become [`MEDIA_MARKER`] in
/// the prompt mtmd cuts ([`marked`]). Jinja's `tojson` (Llama 3.1's tool results) writes it
/// as it is: none of its characters is one it escapes.
fn place() -> &'static str {
    static PLACE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    PLACE.get_or_init(|| {
        use std::hash::{BuildHasher, Hasher};
        let random = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish();
        format!("hearth-media-{random:016x}")
    })
}

/// A rendered prompt as mtmd cuts it: the request's own markers made text, Hearth's places
/// markers.
pub(crate) fn marked(rendered: &str) -> String {
    rendered
        .replace(MEDIA_MARKER, MARKER_AS_TEXT)
        .replace(place(), MEDIA_MARKER)
}

/// The rate audio is resampled to when the projector does not say (Whisper's, which every
/// audio encoder llama.cpp reads uses).
const DEFAULT_AUDIO_RATE: u32 = 16_000;

/// The longest side an image keeps before the projector sees it: more than any projector
/// takes (they resize to 224 to 1,536 pixels a side), and it bounds the pixels held per image
/// (and the time mtmd's own resize takes) whatever the file claims.
const MAX_SIDE: u32 = 2048;

/// A short name for a projector file's contents: its size and the hash of its first 64 KiB
/// (its header: the tensors' names, shapes and offsets).
pub(crate) fn fingerprint(path: &Path) -> String {
    use std::io::Read as _;
    let mut head = Vec::new();
    let size = std::fs::File::open(path)
        .and_then(|f| {
            let size = f.metadata()?.len();
            f.take(64 << 10).read_to_end(&mut head)?;
            Ok(size)
        })
        .unwrap_or(0);
    format!("mmproj{size}x{}", &hex(&Sha256::digest(&head))[..12])
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The stand-in ids of an image's `len` tokens: negative, from its hash and their place.
fn stand_ins(hash: &[u8], len: usize) -> impl Iterator<Item = LlamaToken> + '_ {
    (0..len).map(move |i| {
        let at = (i * 4) % (hash.len() - 3);
        let word = u32::from_le_bytes([hash[at], hash[at + 1], hash[at + 2], hash[at + 3]]);
        let mixed = word ^ (i as u32).wrapping_mul(0x9E37_79B9);
        LlamaToken::new(-1 - (mixed & 0x3FFF_FFFF) as i32)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A projector named for a model (`--projector`) is found first, however the model's path
    /// is written (relative or with `..`), and only for that model.
    #[test]
    fn a_named_projector_is_found_first_for_its_model_alone() {
        let dir = tempfile::tempdir().unwrap();
        let model = dir.path().join("named-model.gguf");
        std::fs::write(&model, b"GGUF").unwrap();
        let beside = dir.path().join("mmproj-named-model.gguf");
        std::fs::write(&beside, b"GGUF").unwrap();
        assert_eq!(find_projector(&model), Some(beside));
        let elsewhere = dir.path().join("kept").join("encoder.gguf");
        name_projector(&model, dir.path().join("kept/../kept/./encoder.gguf"));
        assert_eq!(find_projector(&model), Some(elsewhere.clone()));
        let roundabout = dir.path().join("sub/../named-model.gguf");
        assert_eq!(find_projector(&roundabout), Some(elsewhere));
        let other = dir.path().join("other-model.gguf");
        assert_eq!(find_projector(&other), None);
    }

    #[test]
    fn a_projector_is_found_beside_its_model_and_never_taken_from_another() {
        let dir = tempfile::tempdir().unwrap();
        let touch = |name: &str| std::fs::write(dir.path().join(name), b"x").unwrap();
        let model = dir.path().join("Small-Q4.gguf");
        touch("Small-Q4.gguf");
        assert_eq!(find_projector(&model), None);
        // The one projector of a folder of one model, whatever its name.
        touch("Small-mmproj-f16.gguf");
        assert_eq!(
            find_projector(&model),
            Some(dir.path().join("Small-mmproj-f16.gguf"))
        );
        // Two models in the folder: only one named for this model counts.
        touch("Big-Q4.gguf");
        assert_eq!(find_projector(&model), None);
        touch("mmproj-Big-Q4.gguf");
        assert_eq!(find_projector(&model), None);
        assert_eq!(
            find_projector(&dir.path().join("Big-Q4.gguf")),
            Some(dir.path().join("mmproj-Big-Q4.gguf"))
        );
        // A split model's shards are one model.
        let split = tempfile::tempdir().unwrap();
        for f in [
            "V-00001-of-00002.gguf",
            "V-00002-of-00002.gguf",
            "mmproj-V-f16.gguf",
        ] {
            std::fs::write(split.path().join(f), b"x").unwrap();
        }
        assert_eq!(
            find_projector(&split.path().join("V-00001-of-00002.gguf")),
            Some(split.path().join("mmproj-V-f16.gguf"))
        );
    }

    #[test]
    fn only_hearths_places_are_markers_once_rendered_even_through_tojson() {
        let mut tool = ChatMessage::new("tool", "shot:");
        tool.images = vec![Image(vec![1])];
        // A file the agent read, which mentions the marker: words, not a place.
        let file = ChatMessage::new("user", format!("mtmd splits on {MEDIA_MARKER}."));
        let both = [file, tool];
        let (messages, media) = placed(&both);
        assert_eq!(media.len(), 1);
        // Llama 3.1's template writes a tool's result with `tojson`.
        let template = crate::template::ChatTemplate::new(
            "{% for m in messages %}{{ m.content | tojson }}{% endfor %}",
            "",
            "",
        )
        .unwrap();
        let prompt = marked(&template.render(&messages, false).unwrap());
        assert_eq!(prompt.matches(MEDIA_MARKER).count(), 1, "{prompt}");
        assert_eq!(
            prompt,
            // The file's marker, escaped by `tojson`, stays words.
            format!("\"mtmd splits on \\u003c__media__\\u003e.\"\"{MEDIA_MARKER}shot:\"")
        );
    }

    #[test]
    fn stand_ins_are_never_vocabulary_ids_and_differ_between_images() {
        let a = Sha256::digest(b"a");
        let b = Sha256::digest(b"b");
        let ta: Vec<_> = stand_ins(&a, 64).collect();
        let tb: Vec<_> = stand_ins(&b, 64).collect();
        assert!(ta.iter().chain(&tb).all(|t| t.0 < 0));
        assert_eq!(ta, stand_ins(&a, 64).collect::<Vec<_>>());
        assert!(ta.iter().zip(&tb).all(|(x, y)| x != y));
    }

    #[test]
    fn images_stand_before_the_text_unless_it_places_them() {
        let mut a = ChatMessage::new("user", "what is this?");
        a.images = vec![Image(vec![1]), Image(vec![2])];
        let mut b = ChatMessage::new("user", format!("left {MEDIA_MARKER} right"));
        b.images = vec![Image(vec![3])];
        let mut c = ChatMessage::new("user", format!("see {MEDIA_MARKER}, hear"));
        c.images = vec![Image(vec![4])];
        c.audio = vec![Audio(vec![5])];
        let messages = [a, ChatMessage::new("assistant", "x"), b, c];
        let (placed, media) = placed(&messages);
        let p = place();
        assert_eq!(placed[0].content, format!("{p}{p}what is this?"));
        assert!(placed
            .iter()
            .all(|m| m.images.is_empty() && m.audio.is_empty()));
        assert_eq!(placed[2].content, format!("left {p} right"));
        // A clip stands before the message's images and words.
        assert_eq!(placed[3].content, format!("{p}see {p}, hear"));
        let order: Vec<(&str, u8)> = media
            .iter()
            .map(|m| match m {
                Media::Image(i) => ("image", i.0[0]),
                Media::Audio(a) => ("audio", a.0[0]),
            })
            .collect();
        assert_eq!(
            order,
            [
                ("image", 1),
                ("image", 2),
                ("image", 3),
                ("audio", 5),
                ("image", 4)
            ]
        );
    }
}
