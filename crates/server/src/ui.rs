//! The web UI's files: `ui/dist`, built by the setup. Release builds embed them in the
//! binary; debug builds read them from disk, so a rebuilt UI shows without recompiling.
//! Unknown paths without a file extension get `index.html` (the UI routes in the browser).
//! Without a built UI every page is the "UI not built" page; `build.rs` has release builds
//! rebuilt when `ui/dist` changes, so a binary built before the UI picks it up next build.

use axum::http::{header, StatusCode, Uri};
use axum::response::{Html, IntoResponse, Response};
use rust_embed::RustEmbed;

#[derive(RustEmbed)]
#[folder = "../../ui/dist/"]
#[allow_missing = true]
struct Assets;

/// Shown when the UI was not built (no `ui/dist/index.html`).
const NOT_BUILT: &str = "<!doctype html><title>Hearth</title><h1>Hearth</h1>\
<p>The web UI is not built. Run <code>make run</code> (or <code>scripts/setup.sh</code>), \
which builds it into <code>ui/dist</code>. The API is up: try <code>/api/status</code>.</p>";

pub(crate) async fn serve(uri: Uri) -> Response {
    respond(uri.path(), Assets::get)
}

/// The answer for `path`, with the UI's files looked up by `get`.
fn respond(path: &str, get: impl Fn(&str) -> Option<rust_embed::EmbeddedFile>) -> Response {
    let path = path.trim_start_matches('/');
    let path = if path.is_empty() { "index.html" } else { path };
    if let Some(file) = get(path) {
        return file_response(path, file);
    }
    // A page (the root, or a client-side route the app handles).
    if path == "index.html" || !path.rsplit('/').next().unwrap_or("").contains('.') {
        if let Some(index) = get("index.html") {
            return file_response("index.html", index);
        }
        return (StatusCode::OK, Html(NOT_BUILT)).into_response();
    }
    (StatusCode::NOT_FOUND, "not found").into_response()
}

fn file_response(path: &str, file: rust_embed::EmbeddedFile) -> Response {
    let mime = file.metadata.mimetype().to_owned();
    // Hashed asset names never change content; index.html must always be fresh.
    let cache = if path.starts_with("assets/") {
        "public, max-age=31536000, immutable"
    } else {
        "no-cache"
    };
    (
        [
            (header::CONTENT_TYPE, mime),
            (header::CACHE_CONTROL, cache.to_owned()),
        ],
        file.data.into_owned(),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn without_a_built_ui_every_page_says_so() {
        for path in ["/", "/index.html", "/models"] {
            let r = respond(path, |_| None);
            assert_eq!(r.status(), StatusCode::OK, "{path}");
            let body = axum::body::to_bytes(r.into_body(), 1 << 20).await.unwrap();
            assert!(
                String::from_utf8_lossy(&body).contains("The web UI is not built"),
                "{path}"
            );
        }
        assert_eq!(
            respond("/assets/app.js", |_| None).status(),
            StatusCode::NOT_FOUND
        );
    }
}
