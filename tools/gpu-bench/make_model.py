"""A Llama model with random weights as an F16 GGUF file, for benchmarks on a machine that
has no model and no network: the shape of a real 1B model (16 layers of 2048, 32 heads, 8 of
keys and values, 8192 feed-forward), a real tokenizer (from `tokenizer.py`'s JSON), weights
drawn from N(0, 0.02). What it says is noise; how fast it says it is a 1B model's speed.
Decode with `ignore_eos` so that every answer has the length asked.

    make_model.py TOKENIZER.json OUT.gguf [LAYERS]
"""

import json
import sys

import numpy as np
import gguf

EMBD, HEADS, KV_HEADS, FF, CTX = 2048, 32, 8, 8192, 4096


def main():
    tokenizer = json.load(open(sys.argv[1]))
    out = sys.argv[2]
    layers = int(sys.argv[3]) if len(sys.argv) > 3 else 16
    vocab = len(tokenizer["tokenizer.ggml.tokens"])
    head_dim = EMBD // HEADS
    kv = KV_HEADS * head_dim
    w = gguf.GGUFWriter(out, "llama")
    w.add_name("random-llama")
    w.add_context_length(CTX)
    w.add_embedding_length(EMBD)
    w.add_block_count(layers)
    w.add_feed_forward_length(FF)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(vocab)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_tokenizer_model(tokenizer["tokenizer.ggml.model"])
    w.add_tokenizer_pre(tokenizer["tokenizer.ggml.pre"])
    w.add_token_list(tokenizer["tokenizer.ggml.tokens"])
    w.add_token_types(tokenizer["tokenizer.ggml.token_type"])
    w.add_token_merges(tokenizer["tokenizer.ggml.merges"])
    w.add_bos_token_id(tokenizer["tokenizer.ggml.bos_token_id"])
    w.add_eos_token_id(tokenizer["tokenizer.ggml.eos_token_id"])
    w.add_add_bos_token(tokenizer.get("tokenizer.ggml.add_bos_token", False))

    rng = np.random.default_rng(0)

    def weight(rows, cols):
        return (rng.standard_normal((rows, cols), dtype=np.float32) * 0.02).astype(np.float16)

    def norm():
        return np.ones(EMBD, dtype=np.float32)

    w.add_tensor("token_embd.weight", weight(vocab, EMBD))
    for i in range(layers):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", norm())
        w.add_tensor(p + "attn_q.weight", weight(EMBD, EMBD))
        w.add_tensor(p + "attn_k.weight", weight(kv, EMBD))
        w.add_tensor(p + "attn_v.weight", weight(kv, EMBD))
        w.add_tensor(p + "attn_output.weight", weight(EMBD, EMBD))
        w.add_tensor(p + "ffn_norm.weight", norm())
        w.add_tensor(p + "ffn_gate.weight", weight(FF, EMBD))
        w.add_tensor(p + "ffn_up.weight", weight(FF, EMBD))
        w.add_tensor(p + "ffn_down.weight", weight(EMBD, FF))
    w.add_tensor("output_norm.weight", norm())
    w.add_tensor("output.weight", weight(vocab, EMBD))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
