//! llama.cpp's GPU backends, run on Mesa's software Vulkan device (lavapipe), which ggml uses
//! only when told to (`GGML_VK_VISIBLE_DEVICES=0`: it passes over CPU-type devices otherwise,
//! as it should on a user's machine). The default model loads with every layer on the Vulkan
//! device and its greedy answer through the OpenAI door starts as the CPU's; `--gpu-layers 0`
//! and `--device none` keep it on the CPU; an offload that cannot fit (a margin past the
//! device's memory) or fails (a device buffer limit) goes to the CPU, says so, and the node
//! serves; a second model takes the GPU from an idle one; a model wholly on the GPU decodes
//! with `--gpu-threads` threads and streams each token as it comes. `/api/status` lists the
//! devices and the CPU variant llama.cpp picked; `/metrics` the layers and memory. Lavapipe
//! computes slowly: short prompts, few tokens.

use crate::common;

use common::process::NodeProcess;
use serde_json::{json, Value};

/// Mesa's software Vulkan device, as ggml's first Vulkan device.
const LAVAPIPE: (&str, &str) = ("GGML_VK_VISIBLE_DEVICES", "0");

async fn get(node: &NodeProcess, path: &str) -> Value {
    reqwest::get(format!("{}{path}", node.url))
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// A placement with every layer on the CPU.
fn assert_on_cpu(p: &Value) {
    assert_eq!(
        (&p["backend"], &p["layers"]),
        (&json!("CPU"), &json!(0)),
        "{p}"
    );
}

/// The node's model's placement (`/api/status`).
async fn placement(node: &NodeProcess) -> Value {
    get(node, "/api/status").await["model"]["placement"].clone()
}

/// A greedy completion of `prompt`, `n` tokens.
async fn complete(node: &NodeProcess, prompt: &str, n: u32) -> String {
    let r: Value = reqwest::Client::new()
        .post(format!("{}/v1/completions", node.url))
        .json(&json!({"prompt": prompt, "max_tokens": n, "temperature": 0}))
        .timeout(std::time::Duration::from_secs(300))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    r["choices"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no completion: {r}"))
        .to_owned()
}

fn node(dir: &tempfile::TempDir, args: &[&str], env: &[(&str, &str)]) -> NodeProcess {
    let mut all = vec!["--parallel", "1"];
    if !args.contains(&"--threads") {
        all.extend(["--threads", "1"]);
    }
    all.extend(args);
    NodeProcess::start_with_env(&dir.path().join("data"), &all, env)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_model_runs_on_the_vulkan_device_and_answers_as_on_the_cpu() {
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    // Two threads wanted, one when the model is wholly on the GPU.
    let threads = ["--threads", "2", "--gpu-threads", "1"];
    let gpu = node(&dirs[0], &threads, &[LAVAPIPE]);
    let cpu = node(
        &dirs[1],
        &[&threads[..], &["--gpu-layers", "0"]].concat(),
        &[LAVAPIPE],
    );
    let status = get(&gpu, "/api/status").await;
    assert_eq!(status["threads"], 1, "{status}");
    let cpu_status = get(&cpu, "/api/status").await;
    assert_eq!(cpu_status["threads"], 2, "{cpu_status}");
    let devices = status["compute"]["devices"].as_array().unwrap();
    let vulkan = devices
        .iter()
        .find(|d| d["name"] == "Vulkan0")
        .unwrap_or_else(|| panic!("no Vulkan device: {status}"));
    assert_eq!(vulkan["backend"], "Vulkan");
    assert_eq!(vulkan["kind"], "gpu");
    assert!(vulkan["memory_total"].as_u64().unwrap() > 0, "{vulkan}");
    assert!(devices.iter().any(|d| d["kind"] == "cpu"), "{status}");
    // The CPU variant picked for this processor, and what it was built with.
    #[cfg(target_arch = "x86_64")]
    {
        assert!(status["compute"]["cpu_variant"].is_string(), "{status}");
        assert!(
            status["compute"]["cpu_features"]
                .as_array()
                .is_some_and(|f| f.contains(&json!("SSE3"))),
            "{status}"
        );
    }
    // Every layer and the output on the Vulkan device (SmolLM2-135M: 30 layers and 1).
    let on_gpu = placement(&gpu).await;
    assert_eq!(on_gpu["backend"], "Vulkan", "{on_gpu}");
    assert_eq!(on_gpu["devices"], json!(["Vulkan0"]), "{on_gpu}");
    assert_eq!(
        (&on_gpu["layers"], &on_gpu["layers_total"]),
        (&json!(31), &json!(31))
    );
    assert!(on_gpu.get("note").is_none(), "{on_gpu}");
    // --gpu-layers 0: all of it on the CPU, though the device is there.
    let on_cpu = placement(&cpu).await;
    assert_on_cpu(&on_cpu);
    // The greedy answer's first tokens are the CPU's (later ones may part: the two backends
    // round differently where two tokens are close).
    let prompt = "1, 2, 3, 4, 5,";
    assert_eq!(
        complete(&gpu, prompt, 4).await,
        complete(&cpu, prompt, 4).await
    );
    // Tokens stream as they are decoded (on a GPU their events go out while the next decode
    // runs): the first comes while the generation still runs, not with the last.
    let mut rx = common::sse::stream_sse(
        format!("{}/v1/completions", gpu.url),
        json!({"prompt": prompt, "max_tokens": 16, "temperature": 0, "stream": true,
               "ignore_eos": true}),
    );
    let first: Value = serde_json::from_str(&common::sse::next_data(&mut rx).await).unwrap();
    assert!(first["choices"][0]["text"].is_string(), "{first}");
    let status = get(&gpu, "/api/status").await;
    assert_eq!(
        status["active"], 1,
        "the first token came after the last: {status}"
    );
    while common::sse::next_data(&mut rx).await != "[DONE]" {}
    let metrics = reqwest::get(format!("{}/metrics", gpu.url))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains(&format!(
            "hearth_model_gpu_layers{{model=\"{}\"}} 31",
            common::MODEL_ID
        )),
        "{metrics}"
    );
    assert!(
        metrics.contains("hearth_device_memory_total_bytes{device=\"Vulkan0\",backend=\"Vulkan\"}"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_offload_that_cannot_fit_or_fails_goes_to_the_cpu_says_so_and_serves() {
    let dirs = [
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    ];
    // A margin larger than the device's 2 GiB: fitting places nothing there.
    let unfit = node(&dirs[0], &["--gpu-margin", "65536"], &[LAVAPIPE]);
    // Every layer asked for, on a device whose buffers may not pass 1 KiB: the context fails
    // there, with fewer layers too, and the CPU takes the model.
    let failing = node(
        &dirs[1],
        &["--gpu-layers", "all"],
        &[LAVAPIPE, ("GGML_VK_FORCE_MAX_BUFFER_SIZE", "1024")],
    );
    let none = node(&dirs[2], &["--device", "none"], &[LAVAPIPE]);
    let p = placement(&unfit).await;
    assert_on_cpu(&p);
    let note = p["note"].as_str().unwrap_or_default();
    assert!(
        note.contains("Vulkan0") && note.contains("65536 MiB left free"),
        "{p}"
    );
    let p = placement(&failing).await;
    assert_on_cpu(&p);
    let note = p["note"].as_str().unwrap_or_default();
    assert!(
        note.contains("31 of 31 layers on Vulkan0 failed") && note.contains("15 of 31"),
        "{p}"
    );
    let p = placement(&none).await;
    assert_on_cpu(&p);
    assert!(p.get("note").is_none(), "{p}");
    for n in [&unfit, &failing, &none] {
        assert_eq!(complete(n, "1, 2, 3, 4, 5,", 6).await, " 6, 7,");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_model_takes_the_gpu_from_an_idle_one() {
    let dir = tempfile::tempdir().unwrap();
    let models = dir.path().join("models");
    std::fs::create_dir_all(&models).unwrap();
    for name in ["first.gguf", "second.gguf"] {
        std::fs::hard_link(common::model_path(), models.join(name))
            .or_else(|_| std::fs::copy(common::model_path(), models.join(name)).map(|_| ()))
            .unwrap();
    }
    let models_arg = models.to_string_lossy().into_owned();
    // A 2 GiB device with 1800 MiB kept free: room for one of these models (about 170 MiB
    // each at this context), not two. The first loads at start.
    let n = NodeProcess::start_from_folder_with_env(
        &dir.path().join("data"),
        &[
            "--parallel",
            "1",
            "--threads",
            "1",
            "--ctx",
            "512",
            "--gpu-margin",
            "1800",
            "--models-dir",
            &models_arg,
        ],
        &[LAVAPIPE],
    );
    let ask = async |model: &str| {
        let r: Value = reqwest::Client::new()
            .post(format!("{}/v1/completions", n.url))
            .json(&json!({"model": model, "prompt": "1, 2,", "max_tokens": 1, "temperature": 0}))
            .timeout(std::time::Duration::from_secs(300))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(r["model"], model, "{r}");
    };
    let first = get(&n, "/api/models").await;
    assert_eq!(first["loaded_models"], json!(["first"]), "{first}");
    ask("second").await;
    let list = get(&n, "/api/models").await;
    let row = |id: &str| {
        list["models"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["id"] == id)
            .cloned()
            .unwrap_or_else(|| panic!("no {id}: {list}"))
    };
    // The idle first model made room on the device for the second, which is there whole.
    assert_eq!(row("first")["state"], "available", "{list}");
    let second = row("second");
    assert_eq!(second["state"], "loaded", "{list}");
    assert_eq!(second["placement"]["backend"], "Vulkan", "{second}");
    assert_eq!(second["placement"]["layers"], 31, "{second}");
}
