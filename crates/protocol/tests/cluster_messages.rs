//! The cluster messages against their document and NOTES.md, written from those texts: every
//! example of `protocols/cluster-messages.md` reads in both payload shapes; what the real peers
//! send differently (lowercase UUIDs, `\/`, lenient chunks, unknown chip families and error
//! codes, missing optional fields) reads too; what Hearth writes has the wrapped shape,
//! uppercase ids of its own, peers' ids echoed exactly, integers where the Swift app wants
//! them and no nulls; and frames that are not messages give a clear error.

use hearth_protocol::cluster::{
    decode, encode, AppleTime, ClusterError, ErrorCode, Message, PeerUuid, Shape, ThermalLevel,
};
use serde_json::{json, Value};

/// The document's examples, one per message (the `...` ids completed to real UUIDs).
fn examples() -> Vec<Value> {
    let id = "550e8400-e29b-41d4-a716-446655440000";
    vec![
        json!({"hello": {
            "deviceInfo": {"id": id, "name": "Linux Server",
                "hardware": {"chipFamily": "nvidiaGPU", "chipName": "NVIDIA RTX 4090",
                    "totalRAMGB": 64.0, "gpuCoreCount": 16384, "memoryBandwidthGBs": 1008.0,
                    "tier": 1, "gpuBackend": "cuda", "platform": "linux", "gpuVRAMGB": 24.0},
                "registeredAt": 798134400.0, "lastSeenAt": 798134400.0,
                "isCurrentDevice": true, "loadedModels": []},
            "protocolVersion": 1, "clusterPasscodeHash": null,
            "loadedModels": ["mlx-community/Qwen3-8B-4bit"], "ownerUserID": null}}),
        json!({"heartbeat": {"deviceID": id, "timestamp": 798134400.0,
            "thermalLevel": "nominal", "throttleLevel": 100,
            "loadedModels": ["mlx-community/Qwen3-8B-4bit"], "isGenerating": false,
            "queueDepth": 0, "organizationID": null, "ownerUserID": null}}),
        json!({"inferenceRequest": {"requestID": id, "request": {
            "model": "mlx-community/Qwen3-8B-4bit",
            "messages": [{"role": "system", "content": "You are helpful."},
                         {"role": "user", "content": "Hello"}],
            "temperature": 0.7, "top_p": 0.9, "max_tokens": 2048, "stream": true},
            "streaming": true}}),
        json!({"inferenceChunk": {"requestID": id, "chunk": {"id": "chatcmpl-xxx",
            "object": "chat.completion.chunk", "created": 1713100000,
            "model": "mlx-community/Qwen3-8B-4bit",
            "choices": [{"index": 0, "delta": {"content": "Hello"}, "finish_reason": null}]}}}),
        json!({"inferenceComplete": {"requestID": id}}),
        json!({"inferenceError": {"requestID": id, "errorMessage": "Model not loaded"}}),
        json!({"modelQuery": {"modelID": "mlx-community/Qwen3-8B-4bit"}}),
        json!({"modelQueryResponse": {"modelID": "mlx-community/Qwen3-8B-4bit",
            "available": true, "totalSizeBytes": 4831838208_u64}}),
        json!({"modelTransferRequest": {"transferID": id,
            "modelID": "mlx-community/Qwen3-8B-4bit"}}),
        json!({"modelTransferChunk": {"transferID": id, "fileName": "model.safetensors",
            "offset": 0, "data": "aGVhcnRo", "isLastChunk": false}}),
        json!({"modelTransferComplete": {"transferID": id,
            "modelID": "mlx-community/Qwen3-8B-4bit"}}),
    ]
}

/// `{"name": payload}` as `{"name": {"_0": payload}}`.
fn wrapped(v: &Value) -> Value {
    let (name, payload) = v.as_object().unwrap().iter().next().unwrap();
    json!({ name.clone(): {"_0": payload} })
}

fn bytes(v: &Value) -> Vec<u8> {
    serde_json::to_vec(v).unwrap()
}

#[test]
fn every_example_of_the_document_reads_in_both_shapes_and_writes_back_the_same() {
    for plain in examples() {
        let name = plain.as_object().unwrap().keys().next().unwrap().clone();
        let (m, shape) = decode(&bytes(&plain)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(shape, Shape::Plain, "{name}");
        assert_eq!(m.name(), name);
        let (w, shape) = decode(&bytes(&wrapped(&plain))).unwrap();
        assert_eq!(shape, Shape::Wrapped, "{name}");
        assert_eq!(w, m, "{name}: the shapes carry the same message");
        // Written in either shape, it reads back as the same message.
        for shape in [Shape::Wrapped, Shape::Plain] {
            let again = decode(&encode(&m, shape)).unwrap();
            assert_eq!(again, (m.clone(), shape), "{name}");
        }
    }
    // The acks share their requests' schema.
    let (hello, _) = decode(&bytes(&examples()[0])).unwrap();
    let Message::Hello(h) = hello else { panic!() };
    let ack = decode(&encode(&Message::HelloAck(h.clone()), Shape::Wrapped)).unwrap();
    assert_eq!(ack.0, Message::HelloAck(h));
}

#[test]
fn what_hearth_writes_is_what_the_swift_app_reads() {
    let (m, _) = decode(&bytes(&examples()[0])).unwrap();
    let written: Value = serde_json::from_slice(&encode(&m, Shape::Wrapped)).unwrap();
    let hello = &written["hello"]["_0"];
    // Nulls are left out, not written.
    assert!(hello.get("clusterPasscodeHash").is_none(), "{written}");
    assert!(hello.get("ownerUserID").is_none(), "{written}");
    // Integers where the Swift app decodes integers; every hardware field it needs.
    let hw = &hello["deviceInfo"]["hardware"];
    assert!(hw["gpuCoreCount"].is_u64(), "{hw}");
    for k in [
        "chipFamily",
        "chipName",
        "totalRAMGB",
        "gpuCoreCount",
        "memoryBandwidthGBs",
    ] {
        assert!(hw.get(k).is_some(), "{k} in {hw}");
    }
    for k in [
        "id",
        "name",
        "registeredAt",
        "lastSeenAt",
        "isCurrentDevice",
        "loadedModels",
    ] {
        assert!(hello["deviceInfo"].get(k).is_some(), "{k}");
    }
    let (m, _) = decode(&bytes(&examples()[1])).unwrap();
    let hb: Value = serde_json::from_slice(&encode(&m, Shape::Plain)).unwrap();
    assert!(hb["heartbeat"]["throttleLevel"].is_u64());
    assert!(hb["heartbeat"]["queueDepth"].is_u64());
    let (m, _) = decode(&bytes(&examples()[3])).unwrap();
    let chunk: Value = serde_json::from_slice(&encode(&m, Shape::Plain)).unwrap();
    assert!(chunk["inferenceChunk"]["chunk"]["created"].is_u64());
    // Hearth's own ids are uppercase UUIDs.
    let own = PeerUuid::from_bytes(*b"0123456789abcdef");
    assert_eq!(own.as_str(), own.as_str().to_uppercase());
    assert!(PeerUuid::parse(own.as_str()).is_some());
}

#[test]
fn what_the_real_peers_send_reads_too() {
    // Lowercase UUIDs (the Rust node), echoed exactly as received.
    let lower = "9f0c1e2a-3b4c-4d5e-8f60-718293a4b5c6";
    let (m, _) = decode(&bytes(
        &json!({"inferenceComplete": {"_0": {"requestID": lower, "tokensOut": 12}}}),
    ))
    .unwrap();
    let Message::InferenceComplete(c) = &m else {
        panic!("{m:?}")
    };
    assert_eq!(c.tokens_out, Some(12));
    let out: Value = serde_json::from_slice(&encode(&m, Shape::Wrapped)).unwrap();
    assert_eq!(out["inferenceComplete"]["_0"]["requestID"], lower);
    // Swift writes '/' as '\/'.
    let swift = br#"{"modelQuery":{"_0":{"modelID":"mlx-community\/Qwen3-8B-4bit"}}}"#;
    let (m, _) = decode(swift).unwrap();
    assert_eq!(
        m,
        Message::ModelQuery(hearth_protocol::cluster::ModelQuery {
            model_id: "mlx-community/Qwen3-8B-4bit".into()
        })
    );
    // A chip family no one knew, and a device that says little about itself.
    let (m, _) = decode(&bytes(&json!({"hello": {"_0": {"deviceInfo": {
        "id": lower, "name": "box", "hardware": {"chipFamily": "riscvNPU"}}}}})))
    .unwrap();
    let Message::Hello(h) = m else { panic!() };
    assert_eq!(h.device_info.hardware.chip_family, "riscvNPU");
    assert_eq!(h.protocol_version, 1);
    assert!(h.loaded_models.is_empty() && h.cluster_passcode_hash.is_none());
    // Chunks with `choices: []` and usage, `delta: {}`, extra fields, a float `created`.
    let (m, _) = decode(&bytes(
        &json!({"inferenceChunk": {"_0": {"requestID": lower, "chunk": {
        "id": "x", "object": "chat.completion.chunk", "created": 1713100000.0, "model": "m",
        "system_fingerprint": "fp", "choices": [],
        "usage": {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}}}}}),
    ))
    .unwrap();
    let Message::InferenceChunk(c) = m else {
        panic!()
    };
    assert_eq!(c.chunk.created, 1713100000);
    assert_eq!(c.chunk.usage.map(|u| u.completion_tokens), Some(5));
    assert_eq!(c.chunk.text(), "");
    let (m, _) = decode(&bytes(
        &json!({"inferenceChunk": {"requestID": lower, "chunk": {
        "choices": [{"index": 0, "delta": {}}, {"delta": {"content": "hi"}}]}}}),
    ))
    .unwrap();
    let Message::InferenceChunk(c) = m else {
        panic!()
    };
    assert_eq!(c.chunk.text(), "hi");
    // The Rust node's error codes; one it does not know reads as none.
    let (m, _) = decode(&bytes(
        &json!({"inferenceError": {"_0": {"requestID": lower,
        "errorMessage": "busy", "code": "queue_full"}}}),
    ))
    .unwrap();
    let Message::InferenceError(e) = m else {
        panic!()
    };
    assert_eq!(e.code, Some(ErrorCode::QueueFull));
    let (m, _) = decode(&bytes(&json!({"inferenceError": {"requestID": lower,
        "errorMessage": "?", "code": "on_fire"}})))
    .unwrap();
    let Message::InferenceError(e) = m else {
        panic!()
    };
    assert_eq!(e.code, None);
    // A heartbeat from a hot node, its date, and a request with the Rust node's extra fields.
    let (m, _) = decode(&bytes(&json!({"heartbeatAck": {"_0": {"deviceID": lower,
        "timestamp": 798134400.5, "thermalLevel": "serious", "throttleLevel": 25,
        "isGenerating": true, "queueDepth": 3}}})))
    .unwrap();
    let Message::HeartbeatAck(h) = m else {
        panic!()
    };
    assert_eq!(
        (h.thermal_level, h.throttle_level, h.queue_depth),
        (ThermalLevel::Serious, 25, 3)
    );
    assert_eq!(h.timestamp, AppleTime(798134400.5));
    let (m, _) = decode(&bytes(
        &json!({"inferenceRequest": {"_0": {"requestID": lower,
        "request": {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
            "stream_options": {"include_usage": true}, "seed": 7, "user": "u", "tools": []}}}}),
    ))
    .unwrap();
    let Message::InferenceRequest(r) = m else {
        panic!()
    };
    assert!(r.streaming, "providers always stream");
    assert_eq!(r.request["seed"], 7);
    // Model data is base64.
    let (m, _) = decode(&bytes(&examples()[9])).unwrap();
    let Message::ModelTransferChunk(c) = m else {
        panic!()
    };
    assert_eq!(c.bytes().as_deref(), Some(&b"hearth"[..]));
}

#[test]
fn frames_that_are_not_messages_give_a_clear_error() {
    let id = "550e8400-e29b-41d4-a716-446655440000";
    for (frame, needle) in [
        (b"not json".to_vec(), "must be a JSON object"),
        (b"[1,2]".to_vec(), "must be a JSON object"),
        (bytes(&json!({})), "exactly one key, got 0"),
        (
            bytes(&json!({"hello": {}, "heartbeat": {}})),
            "exactly one key, got 2",
        ),
        (
            bytes(&json!({"relayData": {}})),
            "unknown cluster message 'relayData'",
        ),
        (
            bytes(&json!({"inferenceComplete": {"requestID": "not-a-uuid"}})),
            "expected a UUID",
        ),
        (bytes(&json!({"inferenceComplete": {}})), "requestID"),
        (
            bytes(&json!({"heartbeat": {"deviceID": id, "throttleLevel": 101}})),
            "0 to 100",
        ),
        (
            bytes(&json!({"heartbeat": {"deviceID": id, "thermalLevel": "warm"}})),
            "unknown variant `warm`",
        ),
        (
            bytes(&json!({"inferenceChunk": {"requestID": id, "chunk": {"created": -1}}})),
            "not a time",
        ),
        (bytes(&json!({"hello": {"_0": 5}})), "hello"),
    ] {
        let err = decode(&frame).expect_err(needle).to_string();
        assert!(
            err.contains(needle),
            "{}: {err}",
            String::from_utf8_lossy(&frame)
        );
    }
}

#[test]
fn hearths_own_control_message_and_error_codes_read_and_write_back() {
    use hearth_protocol::cluster::{ControlAction, HearthControl};
    let id = "550E8400-E29B-41D4-A716-446655440000";
    for (action, wire) in [
        (ControlAction::Pause, "pause"),
        (ControlAction::Resume, "resume"),
    ] {
        let v = json!({"hearthControl": {"_0": {"requestID": id, "action": wire}}});
        let (m, shape) = decode(&bytes(&v)).unwrap();
        assert_eq!(shape, Shape::Wrapped);
        assert_eq!(
            m,
            Message::HearthControl(HearthControl {
                request_id: PeerUuid::parse(id).unwrap(),
                action
            })
        );
        assert_eq!(m.name(), "hearthControl");
        let back: Value = serde_json::from_slice(&encode(&m, Shape::Wrapped)).unwrap();
        assert_eq!(back, v);
    }
    assert!(decode(&bytes(
        &json!({"hearthControl": {"requestID": id, "action": "jump"}})
    ))
    .is_err());
    // Each error code's text is what serde writes.
    for code in [
        ErrorCode::ModelNotLoaded,
        ErrorCode::QueueFull,
        ErrorCode::Unavailable,
        ErrorCode::InternalError,
        ErrorCode::Timeout,
        ErrorCode::Cancelled,
    ] {
        assert_eq!(serde_json::to_value(code).unwrap(), json!(code.as_str()));
    }
}

#[test]
fn hearths_rerank_and_its_result_read_and_write_back_within_their_bound() {
    use hearth_protocol::cluster::{HearthRerank, HearthRerankResult};
    let id = "550E8400-E29B-41D4-A716-446655440000";
    let ask = json!({"hearthRerank": {"_0": {"requestID": id, "model": "reranker",
        "query": "q", "documents": ["a", "b"]}}});
    let (m, _) = decode(&bytes(&ask)).unwrap();
    assert_eq!(
        m,
        Message::HearthRerank(HearthRerank {
            request_id: PeerUuid::parse(id).unwrap(),
            model: "reranker".into(),
            query: "q".into(),
            documents: vec!["a".into(), "b".into()],
        })
    );
    let back: Value = serde_json::from_slice(&encode(&m, Shape::Wrapped)).unwrap();
    assert_eq!(back, ask);
    let answer = json!({"hearthRerankResult": {"_0": {"requestID": id, "scores": [0.5, -1.0],
        "promptTokens": 12}}});
    let (m, _) = decode(&bytes(&answer)).unwrap();
    assert_eq!(
        m,
        Message::HearthRerankResult(HearthRerankResult {
            request_id: PeerUuid::parse(id).unwrap(),
            scores: Some(vec![0.5, -1.0]),
            prompt_tokens: 12,
            error: None,
            code: None,
        })
    );
    let back: Value = serde_json::from_slice(&encode(&m, Shape::Wrapped)).unwrap();
    assert_eq!(back, answer);
    // More documents than a rerank door takes is refused as it is read.
    let many: Vec<String> = (0..=hearth_protocol::limits::MAX_RERANK_DOCUMENTS)
        .map(|i| i.to_string())
        .collect();
    let too_many = json!({"hearthRerank": {"requestID": id, "model": "m", "query": "q",
        "documents": many}});
    assert!(matches!(
        decode(&bytes(&too_many)),
        Err(ClusterError::Invalid {
            name: "hearthRerank",
            ..
        })
    ));
}

#[test]
fn hearths_binary_chunk_and_the_request_that_offers_to_take_it() {
    use hearth_protocol::cluster::{decode_owned, encode_owned, HearthChunk};
    let id = "550E8400-E29B-41D4-A716-446655440000";
    // A request asks for binary chunks only when it takes them; without, it is the document's.
    let (m, _) = decode(&bytes(&examples()[8])).unwrap();
    let Message::ModelTransferRequest(mut req) = m else {
        panic!()
    };
    assert_eq!(req.binary_chunks, 0);
    let plain: Value = serde_json::from_slice(&encode(
        &Message::ModelTransferRequest(req.clone()),
        Shape::Plain,
    ))
    .unwrap();
    assert_eq!(plain, examples()[8], "nothing added when not asked");
    req.binary_chunks = hearth_protocol::cluster::BINARY_CHUNK_VERSION;
    let asked: Value = serde_json::from_slice(&encode(
        &Message::ModelTransferRequest(req.clone()),
        Shape::Plain,
    ))
    .unwrap();
    assert_eq!(asked["modelTransferRequest"]["binaryChunks"], 1);
    let (back, _) = decode(&bytes(&asked)).unwrap();
    assert_eq!(back, Message::ModelTransferRequest(req));
    // A binary chunk goes out as its bytes and reads back by its first byte, JSON or not.
    let data: Vec<u8> = (0..=255u8).cycle().take(5000).collect();
    let chunk = HearthChunk::build(
        PeerUuid::parse(id).unwrap(),
        "m.gguf".into(),
        1 << 20,
        true,
        data.len(),
        |b| {
            b.extend_from_slice(&data);
            Ok::<(), ()>(())
        },
    )
    .unwrap();
    let m = Message::HearthChunk(chunk.clone());
    assert_eq!(m.name(), "hearthChunk");
    let wire = encode_owned(m.clone(), Shape::Wrapped);
    assert_eq!(wire, encode(&m, Shape::Plain));
    assert_eq!(wire[0], 0);
    for (got, _) in [decode(&wire).unwrap(), decode_owned(wire.clone()).unwrap()] {
        let Message::HearthChunk(c) = got else {
            panic!("{got:?}")
        };
        assert_eq!(c.data(), &data[..]);
        assert_eq!((c.offset, c.is_last_chunk), (1 << 20, true));
        assert_eq!(c.file_name, "m.gguf");
        assert_eq!(c.transfer_id.as_str(), id);
    }
    // JSON still reads through the owned path.
    let (json, _) = decode_owned(bytes(&examples()[6])).unwrap();
    assert_eq!(json.name(), "modelQuery");
    assert!(decode_owned(vec![0, 9]).is_err());
}

#[test]
fn a_model_of_several_files_lists_each_and_one_of_them_can_be_asked_for() {
    let id = "550E8400-E29B-41D4-A716-446655440000";
    let answer = json!({"modelQueryResponse": {"modelID": "big", "available": true,
        "totalSizeBytes": 30,
        "files": [{"fileName": "big-00001-of-00002.gguf", "sizeBytes": 20, "sha256": "aa"},
                  {"fileName": "big-00002-of-00002.gguf", "sizeBytes": 10, "sha256": "bb"}]}});
    let (m, _) = decode(&bytes(&answer)).unwrap();
    let Message::ModelQueryResponse(r) = &m else {
        panic!("{m:?}")
    };
    assert_eq!(r.files.len(), 2);
    assert_eq!(
        (r.files[1].file_name.as_str(), r.files[1].size_bytes),
        ("big-00002-of-00002.gguf", 10)
    );
    let back: Value = serde_json::from_slice(&encode(&m, Shape::Plain)).unwrap();
    assert_eq!(back, answer);
    // Its vision projector, offered beside it, round-trips too.
    let mut with_projector = answer.clone();
    with_projector["modelQueryResponse"]["projector"] =
        json!({"fileName": "mmproj-big-00001-of-00002.gguf", "sizeBytes": 5, "sha256": "cc"});
    let (m, _) = decode(&bytes(&with_projector)).unwrap();
    let Message::ModelQueryResponse(r) = &m else {
        panic!("{m:?}")
    };
    assert_eq!(r.projector.as_ref().map(|p| p.size_bytes), Some(5));
    let back: Value = serde_json::from_slice(&encode(&m, Shape::Plain)).unwrap();
    assert_eq!(back, with_projector);
    // A model of one file says nothing of files, as the document's answer.
    let (one, _) = decode(&bytes(&examples()[7])).unwrap();
    let plain: Value = serde_json::from_slice(&encode(&one, Shape::Plain)).unwrap();
    assert_eq!(plain, examples()[7]);
    // One file of the model, asked by name.
    let ask = json!({"modelTransferRequest": {"transferID": id, "modelID": "big",
        "fileName": "big-00002-of-00002.gguf", "offset": 0, "length": 10}});
    let (m, _) = decode(&bytes(&ask)).unwrap();
    let Message::ModelTransferRequest(req) = &m else {
        panic!("{m:?}")
    };
    assert_eq!(req.file_name.as_deref(), Some("big-00002-of-00002.gguf"));
    let back: Value = serde_json::from_slice(&encode(&m, Shape::Plain)).unwrap();
    assert_eq!(back, ask);
}
