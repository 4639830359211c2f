//! The bounds on every list a peer sends (DESIGN.md §6): how many model names, files and
//! transports one message may carry, and how long each entry may be. A message past them is
//! refused whole when it is read ([`super::decode`]), so what the node keeps from the peer
//! stays as it was and nothing downstream ever sees more than the bound.

use super::{Hello, Message};
use crate::limits::{
    MAX_MODEL_FILES, MAX_MODEL_FILE_NAME_BYTES, MAX_NOISE_OFFERS, MAX_PEER_MODELS,
    MAX_PEER_MODEL_NAME_BYTES, MAX_RERANK_DOCUMENTS,
};

/// Why `message` is past a bound, if it is.
pub(super) fn check(message: &Message) -> Result<(), String> {
    match message {
        Message::Hello(h) | Message::HelloAck(h) => hello(h),
        Message::Heartbeat(hb) | Message::HeartbeatAck(hb) => {
            models("loadedModels", &hb.loaded_models)?;
            models("visionModels", &hb.vision_models)
        }
        Message::ModelQueryResponse(r) => {
            if r.files.len() > MAX_MODEL_FILES {
                return Err(format!(
                    "files lists {} files, more than {MAX_MODEL_FILES}",
                    r.files.len()
                ));
            }
            match r
                .files
                .iter()
                .chain(&r.projector)
                .find(|f| f.file_name.len() > MAX_MODEL_FILE_NAME_BYTES)
            {
                Some(f) => Err(format!(
                    "a file name of {} bytes, more than {MAX_MODEL_FILE_NAME_BYTES}",
                    f.file_name.len()
                )),
                None => Ok(()),
            }
        }
        Message::HearthRerank(r) if r.documents.len() > MAX_RERANK_DOCUMENTS => Err(format!(
            "documents lists {} documents, more than {MAX_RERANK_DOCUMENTS}",
            r.documents.len()
        )),
        Message::HearthRerankResult(r)
            if r.scores
                .as_ref()
                .is_some_and(|s| s.len() > MAX_RERANK_DOCUMENTS) =>
        {
            Err(format!("scores lists more than {MAX_RERANK_DOCUMENTS}"))
        }
        _ => Ok(()),
    }
}

fn hello(h: &Hello) -> Result<(), String> {
    models("loadedModels", &h.loaded_models)?;
    models("loadedModels", &h.device_info.loaded_models)?;
    match &h.hearth {
        Some(offer) if offer.noise_also.len() > MAX_NOISE_OFFERS => Err(format!(
            "noiseAlso offers {} transports, more than {MAX_NOISE_OFFERS}",
            offer.noise_also.len()
        )),
        _ => Ok(()),
    }
}

fn models(field: &str, names: &[String]) -> Result<(), String> {
    if names.len() > MAX_PEER_MODELS {
        return Err(format!(
            "{field} lists {} models, more than {MAX_PEER_MODELS}",
            names.len()
        ));
    }
    match names.iter().find(|n| n.len() > MAX_PEER_MODEL_NAME_BYTES) {
        Some(n) => Err(format!(
            "a model name of {} bytes, more than {MAX_PEER_MODEL_NAME_BYTES}",
            n.len()
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use crate::cluster::{decode, ClusterError};
    use serde_json::json;

    fn heartbeat(models: serde_json::Value) -> Vec<u8> {
        json!({"heartbeat": {"_0": {"deviceID": "9F0C1E2A-3B4C-4D5E-8F60-718293A4B5C6",
            "loadedModels": models}}})
        .to_string()
        .into_bytes()
    }

    fn hello(top: serde_json::Value, inner: serde_json::Value) -> Vec<u8> {
        json!({"hello": {"_0": {"deviceInfo": {"id": "9F0C1E2A-3B4C-4D5E-8F60-718293A4B5C6",
            "name": "n", "loadedModels": inner}, "loadedModels": top}}})
        .to_string()
        .into_bytes()
    }

    fn refused(bytes: &[u8]) -> String {
        match decode(bytes) {
            Err(ClusterError::Invalid { message, .. }) => message,
            other => panic!("not refused: {other:?}"),
        }
    }

    #[test]
    fn lists_up_to_the_bounds_are_read_and_longer_ones_refused() {
        let names = |n: usize, len: usize| json!(vec!["m".repeat(len); n]);
        assert!(decode(&heartbeat(names(256, 256))).is_ok());
        assert!(refused(&heartbeat(names(257, 1))).contains("257 models"));
        assert!(refused(&heartbeat(names(1, 257))).contains("257 bytes"));
        // Hearth's list of the models that see images is bounded the same way.
        let vision = |models: serde_json::Value| {
            json!({"heartbeat": {"_0": {"deviceID": "9F0C1E2A-3B4C-4D5E-8F60-718293A4B5C6",
                "loadedModels": [], "visionModels": models}}})
            .to_string()
            .into_bytes()
        };
        assert!(decode(&vision(names(256, 8))).is_ok());
        assert!(refused(&vision(names(100_000, 8))).contains("visionModels lists 100000 models"));
        assert!(decode(&hello(names(256, 8), names(256, 8))).is_ok());
        assert!(refused(&hello(names(100_000, 8), json!([]))).contains("100000 models"));
        assert!(refused(&hello(json!([]), names(300, 8))).contains("300 models"));
        let offers = json!({"hello": {"_0": {"deviceInfo": {"id": "9F0C1E2A-3B4C-4D5E-8F60-718293A4B5C6",
            "name": "n"}, "hearth": {"noise": "x", "noiseAlso": vec!["y"; 9]}}}});
        assert!(refused(offers.to_string().as_bytes()).contains("9 transports"));
        let file = |name: &str| json!({"fileName": name, "sizeBytes": 1, "sha256": "00"});
        let answer = |files: serde_json::Value| {
            json!({"modelQueryResponse": {"_0": {"modelID": "m", "available": true,
                "files": files}}})
            .to_string()
        };
        assert!(decode(answer(json!([file("a.gguf")])).as_bytes()).is_ok());
        let long = "f".repeat(513);
        assert!(refused(answer(json!([file(&long)])).as_bytes()).contains("513 bytes"));
        let many = json!(vec![file("a.gguf"); 100_000]);
        assert!(refused(answer(many).as_bytes()).contains("100000 files"));
        let projector = |name: &str| {
            json!({"modelQueryResponse": {"_0": {"modelID": "m", "available": true,
                "projector": file(name)}}})
            .to_string()
        };
        assert!(decode(projector("mmproj-m.gguf").as_bytes()).is_ok());
        assert!(refused(projector(&long).as_bytes()).contains("513 bytes"));
    }
}
