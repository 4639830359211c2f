//! ggml's CPU flash attention over a quantized KV cache, as Hearth patches it
//! (patches/ggml-cpu): the op, run by the CPU backend the node loads, against attention computed
//! here in f64 from the same dequantized cache. Decode steps (one query and a few), grouped
//! heads, masks with biases, ALiBi slopes, sinks, a soft cap, spans over several threads, and
//! a prompt's tiles; the tensors laid out as llama.cpp lays them out.
#![allow(unsafe_code)] // ggml's C API: there is no safe binding of single ops.

use std::ffi::c_void;
use std::ptr;

use llama_cpp_sys_2 as sys;

/// One attention op: its shape, cache type, mask and threads.
#[derive(Clone)]
struct Case {
    dk: i64,
    dv: i64,
    heads: i64,
    kv_heads: i64,
    positions: i64,
    queries: i64,
    kv_type: sys::ggml_type,
    softcap: f32,
    /// ALiBi: each head's slope scales the mask (0: none).
    max_bias: f32,
    /// One sink logit per head (gpt-oss's), in the softmax's denominator only.
    sinks: bool,
    threads: i32,
    /// A sliding window: query `i` sees only this many positions back from its own.
    window: Option<i64>,
}

fn case(kv_type: sys::ggml_type, positions: i64, queries: i64, threads: i32) -> Case {
    Case {
        dk: 256,
        dv: 256,
        heads: 4,
        kv_heads: 1,
        positions,
        queries,
        kv_type,
        softcap: 0.0,
        max_bias: 0.0,
        sinks: false,
        threads,
        window: None,
    }
}

/// Small deterministic numbers around 0 (an LCG; the values only need to be unlike each other).
struct Numbers(u64);

impl Numbers {
    fn next(&mut self) -> f32 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }

    /// `n` numbers, `scale` times larger: scores far from uniform, so that a wrong mask or
    /// merge moves the output by far more than rounding does.
    fn fill(&mut self, n: i64, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.next() * scale).collect()
    }
}

/// The mask of query `i` at position `j`: not seen (past its own place at the end, before its
/// window, and a few holes that differ between queries, like other sequences' cells in a shared
/// pool), else a small bias by distance, as ALiBi's masks carry.
fn mask_value(c: &Case, i: i64, j: i64) -> f32 {
    let at = c.positions - c.queries + i;
    let unseen = j > at || c.window.is_some_and(|w| j + w < at) || (j % 97 == 5 && i % 2 == 1);
    if unseen {
        f32::NEG_INFINITY
    } else {
        -0.01 * ((at - j) % 50) as f32
    }
}

/// `rows` rounded through `kind`: its bytes and the values they stand for.
fn rounded(kind: sys::ggml_type, rows: &[f32], width: i64) -> (Vec<u8>, Vec<f32>) {
    let n_rows = rows.len() as i64 / width;
    let mut bytes = vec![0u8; unsafe { sys::ggml_row_size(kind, width) } * n_rows as usize];
    let mut back = vec![0f32; rows.len()];
    unsafe {
        sys::ggml_quantize_chunk(
            kind,
            rows.as_ptr(),
            bytes.as_mut_ptr().cast(),
            0,
            n_rows,
            width,
            ptr::null(),
        );
        let to_float = (*sys::ggml_get_type_traits(kind)).to_float.unwrap();
        to_float(bytes.as_ptr().cast(), back.as_mut_ptr(), rows.len() as i64);
    }
    (bytes, back)
}

/// ALiBi's slope of head `h` (ggml's formula).
fn slope(c: &Case, h: i64) -> f64 {
    if c.max_bias <= 0.0 {
        return 1.0;
    }
    let log2 = 1i64 << (c.heads as f64).log2().floor() as u32;
    let m0 = 2f64.powf(-(c.max_bias as f64) / log2 as f64);
    let m1 = 2f64.powf(-(c.max_bias as f64 / 2.0) / log2 as f64);
    if h < log2 {
        m0.powi(h as i32 + 1)
    } else {
        m1.powi((2 * (h - log2) + 1) as i32)
    }
}

/// The op's output, [query][head][dv], and the f64 reference from the dequantized cache with
/// the query as the op multiplies it: rounded to q8_0 when `round_query` (ggml's dot product of
/// a q8_0 or q4_0 row takes a q8_0 query).
fn run(c: &Case, round_query: bool) -> (Vec<f32>, Vec<f64>) {
    hearth_engine::llama_backend().unwrap();
    let (dk, dv) = (c.dk, c.dv);
    let mut numbers = Numbers(7 + c.positions as u64);
    // As llama.cpp lays them out: the query [dk, heads, queries] (permuted to [dk, queries,
    // heads]); the cache position-major, the KV heads of one position together.
    let q = numbers.fill(dk * c.heads * c.queries, 2.0);
    let (k_bytes, k) = rounded(
        c.kv_type,
        &numbers.fill(dk * c.kv_heads * c.positions, 1.0),
        dk,
    );
    let (v_bytes, v) = rounded(
        c.kv_type,
        &numbers.fill(dv * c.kv_heads * c.positions, 1.0),
        dv,
    );
    let sinks = numbers.fill(c.heads, 3.0);
    let mut mask = Vec::new();
    for i in 0..c.queries {
        for j in 0..c.positions {
            mask.push(unsafe { sys::ggml_fp32_to_fp16(mask_value(c, i, j)) });
        }
    }
    let scale = 1.0 / (dk as f32).sqrt();

    let mut out = vec![0f32; (dv * c.heads * c.queries) as usize];
    unsafe {
        let params = sys::ggml_init_params {
            mem_size: 16 * sys::ggml_tensor_overhead() + sys::ggml_graph_overhead(),
            mem_buffer: ptr::null_mut(),
            no_alloc: true,
        };
        let ctx = sys::ggml_init(params);
        let tq = sys::ggml_new_tensor_3d(ctx, sys::GGML_TYPE_F32, dk, c.heads, c.queries);
        let tk = sys::ggml_new_tensor_3d(ctx, c.kv_type, dk, c.kv_heads, c.positions);
        let tv = sys::ggml_new_tensor_3d(ctx, c.kv_type, dv, c.kv_heads, c.positions);
        let tm = sys::ggml_new_tensor_2d(ctx, sys::GGML_TYPE_F16, c.positions, c.queries);
        let ts = sys::ggml_new_tensor_1d(ctx, sys::GGML_TYPE_F32, c.heads);
        let qview = sys::ggml_permute(ctx, tq, 0, 2, 1, 3);
        let kview = sys::ggml_permute(ctx, tk, 0, 2, 1, 3);
        let vview = sys::ggml_permute(ctx, tv, 0, 2, 1, 3);
        let fa =
            sys::ggml_flash_attn_ext(ctx, qview, kview, vview, tm, scale, c.max_bias, c.softcap);
        if c.sinks {
            sys::ggml_flash_attn_ext_add_sinks(fa, ts);
        }
        let graph = sys::ggml_new_graph(ctx);
        sys::ggml_build_forward_expand(graph, fa);

        let dev = sys::ggml_backend_dev_by_type(sys::GGML_BACKEND_DEVICE_TYPE_CPU);
        assert!(!dev.is_null(), "no CPU backend");
        let backend = sys::ggml_backend_dev_init(dev, ptr::null());
        let reg = sys::ggml_backend_dev_backend_reg(dev);
        let set_threads =
            sys::ggml_backend_reg_get_proc_address(reg, c"ggml_backend_set_n_threads".as_ptr());
        assert!(
            !set_threads.is_null(),
            "the CPU backend sets no thread count"
        );
        let set_threads: unsafe extern "C" fn(sys::ggml_backend_t, i32) =
            std::mem::transmute(set_threads);
        set_threads(backend, c.threads);
        let buffer = sys::ggml_backend_alloc_ctx_tensors(ctx, backend);
        let set = |t: *mut sys::ggml_tensor, data: *const c_void, len: usize| {
            sys::ggml_backend_tensor_set(t, data, 0, len)
        };
        set(tq, q.as_ptr().cast(), q.len() * 4);
        set(tk, k_bytes.as_ptr().cast(), k_bytes.len());
        set(tv, v_bytes.as_ptr().cast(), v_bytes.len());
        set(tm, mask.as_ptr().cast(), mask.len() * 2);
        set(ts, sinks.as_ptr().cast(), sinks.len() * 4);
        assert_eq!(
            sys::ggml_backend_graph_compute(backend, graph),
            sys::GGML_STATUS_SUCCESS
        );
        sys::ggml_backend_tensor_get(fa, out.as_mut_ptr().cast(), 0, out.len() * 4);
        sys::ggml_backend_buffer_free(buffer);
        sys::ggml_backend_free(backend);
        sys::ggml_free(ctx);
    }

    let q = if round_query {
        rounded(sys::GGML_TYPE_Q8_0, &q, dk).1
    } else {
        q
    };
    let group = c.heads / c.kv_heads;
    let mut want = Vec::with_capacity(out.len());
    for i in 0..c.queries {
        for h in 0..c.heads {
            let hk = h / group;
            let query = &q[((i * c.heads + h) * dk) as usize..][..dk as usize];
            let mut w: Vec<f64> = (0..c.positions)
                .map(|j| {
                    let m = unsafe { sys::ggml_fp16_to_fp32(mask[(i * c.positions + j) as usize]) };
                    if m == f32::NEG_INFINITY {
                        return f64::NEG_INFINITY;
                    }
                    let key = &k[((j * c.kv_heads + hk) * dk) as usize..][..dk as usize];
                    let dot: f64 = query
                        .iter()
                        .zip(key)
                        .map(|(a, b)| *a as f64 * *b as f64)
                        .sum();
                    let s = dot * scale as f64;
                    let s = if c.softcap != 0.0 {
                        c.softcap as f64 * (s / c.softcap as f64).tanh()
                    } else {
                        s
                    };
                    s + slope(c, h) * m as f64
                })
                .collect();
            let sink = c.sinks.then(|| sinks[h as usize] as f64);
            let top = w
                .iter()
                .cloned()
                .chain(sink)
                .fold(f64::NEG_INFINITY, f64::max);
            w.iter_mut().for_each(|x| *x = (*x - top).exp());
            let sum: f64 = w.iter().sum::<f64>() + sink.map_or(0.0, |s| (s - top).exp());
            for d in 0..dv {
                let acc: f64 = (0..c.positions)
                    .filter(|j| w[*j as usize] != 0.0)
                    .map(|j| w[j as usize] * v[((j * c.kv_heads + hk) * dv + d) as usize] as f64)
                    .sum();
                want.push(acc / sum);
            }
        }
    }
    (out, want)
}

/// Asserts that the op is within `MARGIN` of the reference everywhere; `what` names the case.
fn check(c: &Case, round_query: bool, what: &str) {
    let (got, want) = run(c, round_query);
    assert_eq!(got.len(), want.len());
    let e = got
        .iter()
        .zip(&want)
        .map(|(g, w)| {
            assert!(g.is_finite(), "{what}: not a number in the output");
            (*g as f64 - w).abs()
        })
        .fold(0.0, f64::max);
    assert!(e < MARGIN, "{what}: {e}");
}

/// f32 rounding over a few thousand positions; a wrong mask, slope, tile or merge of spans
/// moves the output by 1e-3 and more on these values.
const MARGIN: f64 = 2e-5;

/// A decode step over a quantized cache (the patched kernel: spans of positions shared among
/// the threads, tiles of positions in each) is the attention over the cache's values, with the
/// query rounded to q8_0 as ggml's own decode paths round it. Also a thread with no positions
/// (3 of them, 4 threads).
#[test]
fn a_decode_step_over_a_quantized_cache_is_the_attention_over_its_values() {
    for kind in [sys::GGML_TYPE_Q8_0, sys::GGML_TYPE_Q4_0] {
        for (positions, queries, threads) in [(3000, 1, 2), (3000, 4, 3), (3, 1, 4), (150, 2, 1)] {
            let what =
                format!("type {kind}, {positions} positions, {queries} queries, {threads} threads");
            check(&case(kind, positions, queries, threads), true, &what);
        }
    }
}

/// Grouped heads (four query heads on each of two KV heads: spans per KV head for 1, 2, 3 and 5
/// threads), K and V of different widths, a soft cap on the scores, ALiBi slopes on the mask,
/// and sinks.
#[test]
fn grouped_heads_slopes_sinks_and_a_soft_cap_are_honoured() {
    let c = Case {
        dk: 128,
        dv: 64,
        heads: 8,
        kv_heads: 2,
        softcap: 30.0,
        max_bias: 8.0,
        sinks: true,
        ..case(sys::GGML_TYPE_Q8_0, 1000, 3, 2)
    };
    for threads in [1, 2, 3, 5] {
        check(
            &Case {
                threads,
                ..c.clone()
            },
            true,
            &format!("{threads} threads"),
        );
    }
}

/// A sliding-window layer: the first thread's whole span and most tiles are masked (skipped,
/// and merged as nothing).
#[test]
fn a_sliding_window_masks_whole_spans() {
    for threads in [2, 3] {
        let c = Case {
            window: Some(100),
            ..case(sys::GGML_TYPE_Q8_0, 3000, 2, threads)
        };
        check(&c, true, &format!("{threads} threads"));
    }
}

/// A prompt (64 queries or more) over a quantized cache takes ggml's tiled path, as an f16
/// cache does: the query unrounded, the result exact to f32 rounding; with ALiBi slopes and
/// sinks too. So do 8 queries or more where the decode kernel's buffer would not hold them
/// with tiles of 32 positions (32 heads and 24 queries need ~100k floats of partial sums
/// against the ~82k the planner gives 2 threads here), also where 5 threads cut a head's rows
/// between two chunks. (Unpatched, ggml went one query and one position at a time with the
/// query rounded to q8_0: errors near 2.5e-3.)
#[test]
fn a_prompt_over_a_quantized_cache_is_exact_attention() {
    for kind in [sys::GGML_TYPE_Q8_0, sys::GGML_TYPE_Q4_0] {
        check(&case(kind, 600, 80, 2), false, &format!("type {kind}"));
    }
    let alibi = Case {
        max_bias: 8.0,
        sinks: true,
        ..case(sys::GGML_TYPE_Q8_0, 600, 80, 3)
    };
    check(&alibi, false, "ALiBi and sinks");
    let many_heads = Case {
        dk: 128,
        dv: 128,
        heads: 32,
        kv_heads: 8,
        ..case(sys::GGML_TYPE_Q8_0, 1024, 24, 2)
    };
    for threads in [2, 5] {
        let what = format!("32 heads, 24 queries, {threads} threads");
        check(
            &Case {
                threads,
                ..many_heads.clone()
            },
            false,
            &what,
        );
    }
}
