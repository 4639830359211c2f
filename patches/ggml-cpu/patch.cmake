# Writes a copy of ggml's CPU ops (ggml-cpu/ops.cpp) with Hearth's patch of its flash attention
# for a quantized KV cache (PATCH.md here): scripts/llama-common.cmake compiles the copy in place
# of the original. Each edit must match the original exactly once, or the build stops and says
# which: a llama.cpp update that moves this code needs the patch looked at again.
#
# `cmake -DIN=.../ops.cpp -DOUT=patched.cpp -P patches/ggml-cpu/patch.cmake` writes the copy
# alone (how the patch was developed against a standalone ggml build).

set(HEARTH_GGML_PATCH_DIR "${CMAKE_CURRENT_LIST_DIR}")

function(_hearth_edit var old new what)
  string(FIND "${${var}}" "${old}" _at)
  if(_at EQUAL -1)
    message(FATAL_ERROR "Hearth's ggml-cpu patch (${HEARTH_GGML_PATCH_DIR}): the text to ${what} is not in ops.cpp")
  endif()
  string(LENGTH "${old}" _len)
  math(EXPR _after "${_at} + ${_len}")
  string(SUBSTRING "${${var}}" ${_after} -1 _rest)
  string(FIND "${_rest}" "${old}" _again)
  if(NOT _again EQUAL -1)
    message(FATAL_ERROR "Hearth's ggml-cpu patch (${HEARTH_GGML_PATCH_DIR}): the text to ${what} is in ops.cpp twice")
  endif()
  string(REPLACE "${old}" "${new}" _out "${${var}}")
  set(${var} "${_out}" PARENT_SCOPE)
endfunction()

function(hearth_patch_ggml_ops in out)
  file(READ "${in}" _ops)

  # The decode kernel and the dequantizer (fattn-quantized.inc) go in before ggml's flash
  # attention; ggml_compute_forward_flash_attn_ext_f16 tries the kernel first, once it has
  # checked the op's shapes.
  _hearth_edit(_ops
    [=[static void ggml_compute_forward_flash_attn_ext_f16_one_chunk(
]=]
    "#include \"${HEARTH_GGML_PATCH_DIR}/fattn-quantized.inc\"

static void ggml_compute_forward_flash_attn_ext_f16_one_chunk(
"
    "include the decode kernel")
  _hearth_edit(_ops
    [=[    const int ith = params->ith;
    const int nth = params->nth;

    // When use_ref is set]=]
    [=[    if (hearth_fattn_decode_quantized(params, dst)) {
        return;
    }

    const int ith = params->ith;
    const int nth = params->nth;

    // When use_ref is set]=]
    "try the decode kernel first, after ggml's checks of the op")

  # Prefill: ggml's tiled path (64 queries x 64 positions as f32 GEMMs) takes f16 and f32 caches
  # only; a quantized one fell back to one query and one position at a time. It converts each
  # row to f32 as it packs the tile anyway: a quantized row is dequantized there instead.
  # Where the decode kernel declined (more queries than its buffer holds: many heads, several
  # sequences), 8 queries or more over a quantized cache take the tiled path too: padding a
  # tile costs less there than the one-at-a-time path.
  _hearth_edit(_ops
    [=[                                kv_is_f32_or_f16 &&
                                k->type == v->type &&
                                neq1 >= Q_TILE_SZ);]=]
    [=[                                (kv_is_f32_or_f16 || hearth_fattn_kv_dequantizable(k, v)) &&
                                k->type == v->type &&
                                (neq1 >= Q_TILE_SZ || (neq1 >= 8 && hearth_fattn_kv_dequantizable(k, v))));]=]
    "let the tiled path take a quantized cache")
  _hearth_edit(_ops
    [=[                } else {
                    const float * k_f32_src = (const float *)k_data;]=]
    [=[                } else if (kv_type != GGML_TYPE_F32) {
                    float k_row[HEARTH_FATTN_MAX_D];
                    hearth_fattn_to_float(kv_type, k_data, k_row, DK);
                    for (int64_t dk = 0; dk < DK; dk++) {
                        K_f32[dk * KV_TILE_SZ + tk] = k_row[dk];
                    }
                } else {
                    const float * k_f32_src = (const float *)k_data;]=]
    "dequantize K rows in the tiled path")
  _hearth_edit(_ops
    [=[                } else {
                    memcpy(V32 + tk * DV, v_data, DV * sizeof(float));]=]
    [=[                } else if (kv_type != GGML_TYPE_F32) {
                    hearth_fattn_to_float(kv_type, v_data, V32 + tk * DV, DV);
                } else {
                    memcpy(V32 + tk * DV, v_data, DV * sizeof(float));]=]
    "dequantize V rows in the tiled path")

  # The tiled path converted each tile's mask a value at a time to see whether it can skip
  # the tile. Hearth keeps the sliding-window layers' cache whole (the prompt cache needs it),
  # so at 30k tokens nearly every tile of those layers is masked: the bits are read first, and
  # a kept tile's mask converted a row at a time with ggml's vector conversion.
  _hearth_edit(_ops
    [=[            if (mask) {
                bool can_skip = true;
                for (int tq = 0; tq < tile_rows; tq++) {
                    const ggml_fp16_t * mp_row = (const ggml_fp16_t *)((const char *) mask->data + (iq1 + tq)*mask->nb[1] + (iq2%mask->ne[2])*mask->nb[2] + (iq3%mask->ne[3])*mask->nb[3]);
                    for (int tk = 0; tk < kv_tile; tk++) {
                        mask32[tq * KV_TILE_SZ + tk] = slope * GGML_CPU_FP16_TO_FP32(mp_row[ic + tk]);
                        if (mask32[tq * KV_TILE_SZ + tk] != -INFINITY) {
                            can_skip = false;
                        }
                    }
]=]
    [=[            if (mask) {
                bool can_skip = true;
                for (int tq = 0; tq < tile_rows && can_skip; tq++) {
                    const ggml_fp16_t * mp_row = (const ggml_fp16_t *)((const char *) mask->data + (iq1 + tq)*mask->nb[1] + (iq2%mask->ne[2])*mask->nb[2] + (iq3%mask->ne[3])*mask->nb[3]);
                    can_skip = hearth_fattn_masked(mp_row + ic, kv_tile);
                }
                for (int tq = 0; tq < tile_rows && !can_skip; tq++) {
                    const ggml_fp16_t * mp_row = (const ggml_fp16_t *)((const char *) mask->data + (iq1 + tq)*mask->nb[1] + (iq2%mask->ne[2])*mask->nb[2] + (iq3%mask->ne[3])*mask->nb[3]);
                    ggml_cpu_fp16_to_fp32(mp_row + ic, mask32 + tq * KV_TILE_SZ, kv_tile);
                    if (slope != 1.0f) {
                        ggml_vec_scale_f32(kv_tile, mask32 + tq * KV_TILE_SZ, slope);
                    }
]=]
    "read the tiled path's mask as bits first")

  # Written only when it changes, so a reconfigure does not recompile every CPU variant.
  set(_old "")
  if(EXISTS "${out}")
    file(READ "${out}" _old)
  endif()
  if(NOT _old STREQUAL _ops)
    file(WRITE "${out}" "${_ops}")
  endif()
endfunction()

if(CMAKE_SCRIPT_MODE_FILE STREQUAL CMAKE_CURRENT_LIST_FILE AND DEFINED IN AND DEFINED OUT)
  hearth_patch_ggml_ops("${IN}" "${OUT}")
endif()
