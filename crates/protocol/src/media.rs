//! Images a message carries: their bytes as the doors received them (base64 on every wire,
//! a data URI on OpenAI's), the limits every door checks before an image goes further, and
//! their decoding to pixels (Rust's decoders, the size read and checked before any pixel is),
//! which the engine calls before the model's projector sees them.

use base64::Engine as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The most bytes one image may have, encoded (PNG, JPEG, ...): a phone's photo fits, and so
/// does one in an HTTP body ([`crate::limits::MAX_HTTP_BODY_BYTES`]) in base64.
pub const MAX_IMAGE_BYTES: usize = 8 << 20;
/// The most images one request may carry: each costs an encode and its tokens in the context.
pub const MAX_IMAGES: usize = 16;
/// What a door whose prompts are text only (the WebSocket doors) says of images sent to it,
/// rather than dropping them unseen.
pub const TEXT_ONLY_DOOR: &str = "images are not part of this protocol, whose prompts are text: \
send pictures to /v1/chat/completions, /v1/messages, /v1/responses, /api/chat or /api/generate";
/// The most pixels one image may have once decoded (about 7,000 x 5,000): a decoded image
/// takes 3 bytes a pixel, and the projector shrinks it to a few hundred pixels a side anyway.
pub const MAX_IMAGE_PIXELS: u64 = 36_000_000;

/// Where an image stands in a message's text (llama.cpp's multimodal marker). A message whose
/// text holds none has its images before its text.
pub const MEDIA_MARKER: &str = "<__media__>";

/// [`MEDIA_MARKER`] as words: a zero-width space inside, so that a marker a request's own text
/// holds (a source file an agent read that mentions it, say) is never taken for a place.
pub const MARKER_AS_TEXT: &str = "<\u{200B}__media__>";

/// `text` a request sent, beside places a door makes for its images: its own markers as words.
pub fn as_text(text: &str) -> std::borrow::Cow<'_, str> {
    if text.contains(MEDIA_MARKER) {
        text.replace(MEDIA_MARKER, MARKER_AS_TEXT).into()
    } else {
        text.into()
    }
}

/// One image, as its file's bytes. On the wire (between nodes, in JSON) it is base64.
#[derive(Clone, PartialEq, Eq)]
pub struct Image(pub Vec<u8>);

impl std::fmt::Debug for Image {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Image({} bytes)", self.0.len())
    }
}

/// Why an image was refused before it was decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImageError {
    #[error("the image is not valid base64: {0}")]
    Base64(String),
    #[error("the image is empty")]
    Empty,
    #[error("the image has {bytes} bytes; the limit is {limit} bytes ({} MiB)", MAX_IMAGE_BYTES >> 20)]
    TooLarge { bytes: usize, limit: usize },
    #[error("{count} images in one request; the limit is {limit}")]
    TooMany { count: usize, limit: usize },
    #[error("an image URL must be a data URI (data:image/png;base64,...): fetching images from the web is off on this node (hearth-node --image-urls turns it on)")]
    NotDataUri,
    #[error("not an image this node reads: PNG, JPEG, GIF and WebP are (the file's first bytes are none of them)")]
    UnknownFormat,
    #[error("{0} images are not read here: PNG, JPEG, GIF and WebP are")]
    OtherFormat(String),
    #[error("a damaged {format} file: {why}")]
    Damaged { format: String, why: String },
    #[error("the image is {width}x{height} pixels; the limit is {MAX_IMAGE_PIXELS} pixels")]
    TooManyPixels { width: u32, height: u32 },
}

/// An image decoded: its size and its pixels, RGB, row by row.
pub struct Pixels {
    pub width: u32,
    pub height: u32,
    pub rgb: Vec<u8>,
}

impl std::fmt::Debug for Pixels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Pixels({}x{})", self.width, self.height)
    }
}

impl Image {
    /// An image from base64 (standard alphabet, padding optional), or from a `data:` URI.
    pub fn from_base64(text: &str) -> Result<Self, ImageError> {
        let payload = match text.strip_prefix("data:") {
            Some(rest) => match rest.split_once(";base64,") {
                Some((_, b64)) => b64,
                None => return Err(ImageError::Base64("a data URI without ;base64,".into())),
            },
            None => text,
        };
        // Line-wrapped base64 (MIME's, Go's decoder takes it) is read too.
        let payload: std::borrow::Cow<'_, str> = if payload.contains(char::is_whitespace) {
            payload.split_whitespace().collect::<String>().into()
        } else {
            payload.into()
        };
        // Decoded, base64 is 3/4 of its length: a payload far over the limit is not decoded.
        if payload.len() / 4 * 3 > MAX_IMAGE_BYTES + 3 {
            return Err(ImageError::TooLarge {
                bytes: payload.len() / 4 * 3,
                limit: MAX_IMAGE_BYTES,
            });
        }
        let bytes = base64::engine::general_purpose::STANDARD_NO_PAD
            .decode(payload.trim_end_matches('='))
            .map_err(|e| ImageError::Base64(e.to_string()))?;
        Self::from_bytes(bytes)
    }

    /// An image from its file's bytes (one fetched by URL), checked as one from base64 is.
    pub fn from_file(bytes: Vec<u8>) -> Result<Self, ImageError> {
        Self::from_bytes(bytes)
    }

    /// The image as a `data:` URI of its media type.
    pub fn data_uri(&self) -> Result<String, ImageError> {
        Ok(format!(
            "data:{};base64,{}",
            self.media_type()?,
            base64::engine::general_purpose::STANDARD.encode(&self.0)
        ))
    }

    /// An image from a URL part (OpenAI's `image_url.url`): only data URIs are read.
    pub fn from_url(url: &str) -> Result<Self, ImageError> {
        if !url.starts_with("data:") {
            return Err(ImageError::NotDataUri);
        }
        Self::from_base64(url)
    }

    /// Decode to RGB: PNG, JPEG, GIF (its first frame) or WebP, within [`MAX_IMAGE_PIXELS`],
    /// whose size is read from the header and checked before any pixel is decoded.
    pub fn decode(&self) -> Result<Pixels, ImageError> {
        self.decode_within(u32::MAX)
    }

    /// [`Self::decode`], then shrunk (its proportions kept) so that no side is longer than
    /// `max_side`: one large image at a time is held whole, never a request's worth.
    pub fn decode_within(&self, max_side: u32) -> Result<Pixels, ImageError> {
        let (format, name) = self.format()?;
        let damaged = |e: image::ImageError| ImageError::Damaged {
            format: name.to_owned(),
            why: e.to_string(),
        };
        let reader = || image::ImageReader::with_format(std::io::Cursor::new(&self.0), format);
        let (width, height) = reader().into_dimensions().map_err(damaged)?;
        if u64::from(width) * u64::from(height) > MAX_IMAGE_PIXELS {
            return Err(ImageError::TooManyPixels { width, height });
        }
        let mut limits = image::Limits::default();
        limits.max_image_width = Some(width);
        limits.max_image_height = Some(height);
        // RGBA at most, and the decoders' own buffers beside it.
        limits.max_alloc = Some(MAX_IMAGE_PIXELS * 8);
        let mut reader = reader();
        reader.limits(limits);
        let mut img = reader.decode().map_err(damaged)?;
        if img.width() > max_side || img.height() > max_side {
            img = img.resize(max_side, max_side, image::imageops::FilterType::Triangle);
        }
        let rgb = img.into_rgb8();
        Ok(Pixels {
            width: rgb.width(),
            height: rgb.height(),
            rgb: rgb.into_raw(),
        })
    }

    fn from_bytes(bytes: Vec<u8>) -> Result<Self, ImageError> {
        if bytes.is_empty() {
            return Err(ImageError::Empty);
        }
        if bytes.len() > MAX_IMAGE_BYTES {
            return Err(ImageError::TooLarge {
                bytes: bytes.len(),
                limit: MAX_IMAGE_BYTES,
            });
        }
        let image = Self(bytes);
        image.probe()?;
        Ok(image)
    }

    /// Its format and size from its header, without decoding a pixel: what every door checks
    /// as it reads a request (the pixels are decoded where the model runs).
    pub fn probe(&self) -> Result<(u32, u32), ImageError> {
        let (format, name) = self.format()?;
        let (width, height) =
            image::ImageReader::with_format(std::io::Cursor::new(&self.0), format)
                .into_dimensions()
                .map_err(|e| ImageError::Damaged {
                    format: name.to_owned(),
                    why: e.to_string(),
                })?;
        if u64::from(width) * u64::from(height) > MAX_IMAGE_PIXELS {
            return Err(ImageError::TooManyPixels { width, height });
        }
        Ok((width, height))
    }

    /// Its media type (`image/png`, ...), when it is a format this node reads.
    pub fn media_type(&self) -> Result<&'static str, ImageError> {
        Ok(match self.format()?.0 {
            image::ImageFormat::Png => "image/png",
            image::ImageFormat::Jpeg => "image/jpeg",
            image::ImageFormat::Gif => "image/gif",
            image::ImageFormat::WebP => "image/webp",
            other => return Err(ImageError::OtherFormat(format!("{other:?}"))),
        })
    }

    /// Its format, when it is one this node reads.
    fn format(&self) -> Result<(image::ImageFormat, &'static str), ImageError> {
        use image::ImageFormat;
        let format = image::guess_format(&self.0).map_err(|_| ImageError::UnknownFormat)?;
        let name = match format {
            ImageFormat::Png => "PNG",
            ImageFormat::Jpeg => "JPEG",
            ImageFormat::Gif => "GIF",
            ImageFormat::WebP => "WebP",
            other => return Err(ImageError::OtherFormat(format!("{other:?}"))),
        };
        Ok((format, name))
    }
}

/// A request's image count against [`MAX_IMAGES`].
pub fn check_count(count: usize) -> Result<(), ImageError> {
    if count > MAX_IMAGES {
        return Err(ImageError::TooMany {
            count,
            limit: MAX_IMAGES,
        });
    }
    Ok(())
}

impl Serialize for Image {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(&self.0))
    }
}

impl<'de> Deserialize<'de> for Image {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Self::from_base64(&text).map_err(serde::de::Error::custom)
    }
}

/// A 1x1 PNG, base64: for the tests of every door that reads images.
#[cfg(test)]
pub(crate) const PNG_1X1: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABAQMAAAAl21bKAAAAA1BMVEX/AAAZ4gk3AAAACklEQVQI12NgAAAAAgAB4iG8MwAAAABJRU5ErkJggg==";

#[cfg(test)]
mod tests {
    use super::*;

    fn png(width: u32, height: u32, colour: [u8; 3]) -> Vec<u8> {
        let img = image::RgbImage::from_pixel(width, height, image::Rgb(colour));
        let mut out = std::io::Cursor::new(Vec::new());
        img.write_to(&mut out, image::ImageFormat::Png).unwrap();
        out.into_inner()
    }

    #[test]
    fn images_decode_and_bad_ones_are_refused_by_name() {
        let p = Image(png(3, 2, [9, 8, 7])).decode().unwrap();
        assert_eq!((p.width, p.height), (3, 2));
        assert_eq!(&p.rgb[..3], &[9, 8, 7]);
        // Shrunk to a longest side, its proportions kept.
        let p = Image(png(40, 10, [9, 8, 7])).decode_within(20).unwrap();
        assert_eq!((p.width, p.height), (20, 5));
        assert_eq!(p.rgb.len(), 20 * 5 * 3);
        let mut cut = png(64, 64, [1, 2, 3]);
        cut.truncate(cut.len() / 2);
        let e = Image(cut).decode().unwrap_err().to_string();
        assert!(e.starts_with("a damaged PNG file"), "{e}");
        let e = Image(b"%PDF-1.7 not a picture".to_vec())
            .decode()
            .unwrap_err();
        assert_eq!(e, ImageError::UnknownFormat);
        // A JPEG whose header claims 65535 x 65535 pixels is refused before any is read.
        let mut jpeg = std::io::Cursor::new(Vec::new());
        image::RgbImage::from_pixel(8, 8, image::Rgb([0, 0, 0]))
            .write_to(&mut jpeg, image::ImageFormat::Jpeg)
            .unwrap();
        let mut huge = jpeg.into_inner();
        let sof = huge.windows(2).position(|w| w == [0xFF, 0xC0]).unwrap();
        huge[sof + 5..sof + 9].copy_from_slice(&[0xFF; 4]);
        assert_eq!(
            Image(huge).decode().unwrap_err(),
            ImageError::TooManyPixels {
                width: 65_535,
                height: 65_535
            }
        );
        // A PNG whose size was changed fails its checksum: damaged.
        let mut png_huge = png(1, 1, [0, 0, 0]);
        png_huge[16..20].copy_from_slice(&20_000u32.to_be_bytes());
        assert!(matches!(
            Image(png_huge).decode(),
            Err(ImageError::Damaged { .. })
        ));
    }

    /// GIF gives its first frame, WebP decodes: the two formats beside PNG and JPEG.
    #[test]
    fn a_gif_gives_its_first_frame_and_a_webp_decodes() {
        let frame =
            |c: [u8; 4]| image::Frame::new(image::RgbaImage::from_pixel(4, 3, image::Rgba(c)));
        let mut gif = Vec::new();
        {
            let mut encoder = image::codecs::gif::GifEncoder::new(&mut gif);
            encoder
                .encode_frames([frame([250, 0, 0, 255]), frame([0, 0, 250, 255])])
                .unwrap();
        }
        let p = Image::from_file(gif).unwrap().decode().unwrap();
        assert_eq!((p.width, p.height), (4, 3));
        assert!(
            p.rgb[0] > 200 && p.rgb[2] < 50,
            "not the first frame: {:?}",
            &p.rgb[..3]
        );
        let mut webp = std::io::Cursor::new(Vec::new());
        image::RgbImage::from_pixel(5, 2, image::Rgb([10, 200, 30]))
            .write_to(&mut webp, image::ImageFormat::WebP)
            .unwrap();
        let img = Image::from_file(webp.into_inner()).unwrap();
        assert!(img
            .data_uri()
            .unwrap()
            .starts_with("data:image/webp;base64,"));
        let p = img.decode().unwrap();
        assert_eq!((p.width, p.height), (5, 2));
        assert_eq!(&p.rgb[..3], &[10, 200, 30]);
    }

    #[test]
    fn base64_and_data_uris_are_read_and_written_back() {
        let img = Image::from_base64(PNG_1X1).unwrap();
        assert!(img.0.starts_with(b"\x89PNG\r\n\x1a\n"));
        assert_eq!(img.probe(), Ok((1, 1)));
        assert_eq!(img.media_type(), Ok("image/png"));
        assert_eq!(
            Image::from_base64(PNG_1X1.trim_end_matches('=')).unwrap(),
            img
        );
        let wrapped = format!("{}\r\n{}\n", &PNG_1X1[..40], &PNG_1X1[40..]);
        assert_eq!(Image::from_base64(&wrapped).unwrap(), img);
        assert_eq!(
            Image::from_url(&format!("data:image/png;base64,{PNG_1X1}")).unwrap(),
            img
        );
        let uri = img.data_uri().unwrap();
        assert_eq!(Image::from_url(&uri).unwrap(), img);
        assert!(uri.starts_with("data:image/png;base64,"), "{uri}");
        assert_eq!(Image::from_file(img.0.clone()).unwrap(), img);
        assert_eq!(Image::from_file(Vec::new()), Err(ImageError::Empty));
        let json = serde_json::to_string(&img).unwrap();
        assert_eq!(json, format!("\"{PNG_1X1}\""));
        // Only a header is read: the format and the size are judged at the door.
        assert!(matches!(
            Image::from_base64("iVBORw0KGgo="),
            Err(ImageError::Damaged { .. })
        ));
        assert_eq!(
            Image::from_base64("JVBERi0xLjcK"),
            Err(ImageError::UnknownFormat)
        );
        assert_eq!(serde_json::from_str::<Image>(&json).unwrap(), img);
    }

    #[test]
    fn bad_images_are_refused_with_the_limit_named() {
        assert!(matches!(
            Image::from_base64("not base64!"),
            Err(ImageError::Base64(_))
        ));
        assert_eq!(Image::from_base64(""), Err(ImageError::Empty));
        assert_eq!(
            Image::from_url("https://example.com/cat.png"),
            Err(ImageError::NotDataUri)
        );
        let big = "A".repeat((MAX_IMAGE_BYTES + 1024) / 3 * 4);
        let e = Image::from_base64(&big).unwrap_err();
        assert!(e.to_string().contains("8 MiB"), "{e}");
        assert!(check_count(MAX_IMAGES).is_ok());
        assert!(check_count(MAX_IMAGES + 1)
            .unwrap_err()
            .to_string()
            .contains("limit is 16"));
    }
}
