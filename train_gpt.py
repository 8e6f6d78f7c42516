"""Parameter-golf GPT trainer, the counted code of a submission: its defaults ARE record 2026-03-23 "LeakyReLU^2 +
Legal Score-First TTT + Parallel Muon" (README: what differs). Settings are env vars (`python train_gpt.py --help`);
run `torchrun --standalone --nproc_per_node=8 train_gpt.py`. Without CUDA it runs on the CPU (fp32, gloo, eager)."""

import atexit, base64, contextlib, copy, difflib, functools, glob, hashlib, importlib.metadata, io, json, linecache
import inspect, lzma, math, os, queue, random, re, shutil, signal, subprocess, sys, threading, time, tokenize, uuid
import zlib
from dataclasses import dataclass, fields, replace
from typing import Callable, Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple

if __name__ == "__main__" and not {"OMP_WAIT_POLICY", "GOMP_SPINCOUNT"} & set(os.environ):  # run, not imported: an
    os.environ.update(OMP_WAIT_POLICY="PASSIVE", GOMP_SPINCOUNT="1000")  # idle OpenMP thread spins briefly, then sleeps
try:
    import numpy as np
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch import Tensor, nn
    from torch.distributed.elastic.multiprocessing.errors import record
except ImportError as missing:  # e.g. `python3 train_gpt.py --help` with a Python that lacks torch: one line
    if __name__ != "__main__":
        raise
    sys.exit("error: %s: this Python (%s) lacks it; run tools/py train_gpt.py (the quick start's Python, with "
             "requirements.txt installed)" % (missing, sys.executable))

def optional_module(name: str):
    """The module, or None where it is not installed (what needs it checks for None, or runs without it)."""
    try:
        return importlib.import_module(name)
    except ImportError:
        return None

brotli = optional_module("brotli")  # the packed counted code (pack_source), COMPRESSOR=brotli; without it: lzma only
constriction = optional_module("constriction")  # COMPRESSOR=pergroup's entropy coder (rANS)
_flash_attn_func = getattr(optional_module("flash_attn_interface"), "flash_attn_func", None)  # optional FA3 (Hopper)
_flash_attn_varlen_func = getattr(optional_module("flash_attn_interface"), "flash_attn_varlen_func", None)
_fa4 = optional_module("flash_attn.cute.interface")  # optional FlashAttention-4 (flash-attn-4: CuTe DSL, SM90/SM100)
_torch_varlen_attn = getattr(optional_module("torch.nn.attention.varlen"), "varlen_attn", None)  # torch >= 2.10
TORCH_VARLEN_CAUSAL = {"window_size": (-1, 0)} if "window_size" in (  # its causal form (torch 2.11: no is_causal)
    inspect.signature(_torch_varlen_attn).parameters if _torch_varlen_attn else ()) else {"is_causal": True}
_flex = optional_module("torch.nn.attention.flex_attention")
triton, tl = optional_module("triton"), optional_module("triton.language")  # the fused ops of section 5

# ==== 1. CONFIGURATION ====
ENV_PREFIXES_OF_OURS = ("TTT_", "MUON_", "TRAIN_", "VAL_", "EMA_", "SWA_", "QAT_", "LATE_QAT", "EVAL_", "ADAM_",
                        "TIED_", "BIGRAM_", "VE_", "XSA_", "ROPE_", "MODEL_", "NUM_", "ATTN_", "QK_", "MLP_", "LOOP_",
                        "GPTQ_", "EMBED_", "SKIP_", "WARMDOWN_", "CHECKPOINT_", "LQER_")
GPTQ_FIELDS = ("matrix_bits", "embed_bits", "matrix_clip_sigmas", "embed_clip_sigmas", "mlp_clip_sigmas",
               "attn_clip_sigmas", "attn_gate_int8", "lqer_rank", "lqer_top_k", "lqer_group",
               "gptq_calibration_batches", "gptq_calibration_loader")
COMPRESSORS = ("pergroup", "brotli", "lzma")
CHOICES = {  # the values a setting of a fixed set accepts
    "attn_backend": ("auto", "fa3", "cudnn", "flash", "efficient", "math"), "qk_kernel": ("auto", "triton", "torch"),
    "mlp_kernel": ("auto", "triton", "torch"), "train_loader": ("sequential", "shuffled", "documents"),
    "train_shuffle_seed": ("rank", "rank_and_seed"), "quantizer": ("rowclip", "gptq"), "muon_dtype": ("bf16", "fp32"),
    "grad_clip_scope": ("local", "reduced"), "compressor": COMPRESSORS, "torch_compile": ("auto", "0", "1"),
    "muon_ns_coefficients": ("quintic", "polar_express"), "ce_kernel": ("auto", "triton", "torch"),
    "doc_attn_backend": ("auto", "fa3_varlen", "fa4_varlen", "torch_varlen", "flex", "sdpa"),
    "gptq_calibration_loader": ("train", "shuffled"), "ttt_mode": ("full", "lora_phased")}
# RECIPE: a table of defaults per record. The dataclass defaults ARE 2026-03-23 (SPEC.md); a table lists what its
# record changes (SPEC_0409 §1, §4-§7; QK_GAIN_INIT and TTT as the record ran them). The environment overrides both.
RECIPES = {"2026-03-23": {}, "2026-04-09": dict(
    data_path="./data/datasets/fineweb10B_sp8192", tokenizer_path="./data/tokenizers/fineweb_8192_bpe.model",
    vocab_size=8192, iterations=20000, warmdown_iters=0, warmdown_frac=0.72, min_lr=0.0, gptq_reserve_seconds=12.0,
    mlp_mult=4.0, qk_gain_init=5.25, xsa_last_n=11, bigram_enabled=False, smear_enabled=False, ve_enabled=False,
    num_loops=2, loop_start=3, loop_end=5, enable_looping_at=0.35, parallel_residual_start=7, skip_gates_enabled=True,
    rope_train_seq_len=0, rope_bf16=True, init_linear_draws=True, matrix_lr=0.022, scalar_lr=0.02, tied_embed_lr=0.03,
    muon_wd=0.095, adam_wd=0.02, embed_wd=0.085, muon_row_normalize=True, muon_dtype="fp32", grad_clip_scope="reduced",
    ema_decay=0.9965, late_qat_threshold=0.0, ttt_lr=0.005, train_loader="shuffled", quantizer="gptq",
    compressor="pergroup", byte_shuffle=True, control_tensor_name_patterns="attn_scale,attn_scales,mlp_scale,"
    "mlp_scales,resid_mix,resid_mixes,q_gain,skip_weight,skip_weights,skip_gates")}
# 2026-04-27 (SPEC_0427 §11: the record's run, not its script's defaults, §0.1), as changes to 2026-04-09's table;
# GPTQ_RESERVE_SECONDS 8, not the run's 0.5, keeps the Hessians' training-data reads inside the cap (§0.4); no
# round-trip or sliding eval: the score is the phased TTT's, and they would cost the eval clock a compile each.
RECIPES["2026-04-27"] = dict(
    RECIPES["2026-04-09"], data_path="./data/datasets/fineweb10B_sp8192_lossless_caps_caseops_v1_reserved",
    tokenizer_path="./data/tokenizers/fineweb_8192_bpe_lossless_caps_caseops_v1_reserved.model", qk_gain_init=5.0,
    parallel_residual_start=-1, parallel_start_layer=8, smear_gate_enabled=True, sparse_attn_gate_enabled=True,
    sparse_attn_gate_scale=0.5, gate_window=12, init_linear_draws=False, init_mlp_after_attention=True, matrix_lr=0.026,
    muon_momentum=0.97, muon_dtype="bf16", beta2=0.99, grad_clip_scope="local", warmdown_frac=0.85, min_lr=0.1,
    gptq_reserve_seconds=8.0, val_loss_every=0, gptq_calibration_batches=16, embed_bits=7, embed_clip_sigmas=14.0,
    rope_ntk=False, muon_ns_coefficients="polar_express", train_loader="documents", gptq_calibration_loader="shuffled",
    ttt_mode="lora_phased", ttt_lr=0.001, ttt_epochs=1, roundtrip_eval=False, sliding_eval=False, mlp_clip_sigmas=11.5,
    attn_clip_sigmas=13.0, attn_gate_int8=True, lqer_rank=4, compressor="pergroup",
    control_tensor_name_patterns=RECIPES["2026-04-09"]["control_tensor_name_patterns"]
    + ",parallel_post_lambdas,parallel_resid_lambdas,attn_gate_w,smear_gate,smear_lambda")

@dataclass(frozen=True)
class Hyperparameters:
    """Run settings, env var = field name upper-cased (read by from_env only). A field's trailing comment is its
    `--help` line and the comment lines above a group head it (settings_help parses them)."""
    # Data and run identity
    recipe: str = "2026-03-23"  # the table of defaults: 2026-03-23, 2026-04-09 or 2026-04-27; a setting overrides it
    data_path: str = "./data/datasets/fineweb10B_sp1024"  # shards fineweb_{train,val}_*.bin (+ manifest.json)
    tokenizer_path: str = "./data/tokenizers/fineweb_1024_bpe.model"  # the SentencePiece model that made them
    allow_tokenizer_mismatch: bool = False  # 1: use a tokenizer that DATA_PATH's manifest.json does not name
    run_id: str = ""  # names logs/<RUN_ID>.txt and the outputs folder logs/<RUN_ID>/; empty: a fresh uuid4
    seed: int = 1337  # RNG seed of the model init (and of the shuffled loader with rank_and_seed)
    # Checkpoints and resume (docs/checkpoint.md): logs/<RUN_ID>/checkpoints/step_<N>/
    checkpoint_every: int = 0  # save a checkpoint every N training steps; 0: off
    checkpoint_on_signal: bool = False  # 1: SIGTERM/SIGINT save one at the end of the current step, then stop
    checkpoint_keep: int = 2  # checkpoints kept (the newest); older ones are deleted
    resume: str = ""  # a checkpoint folder, or latest (of RUN_ID's): continue that run in its log and outputs
    # Schedule and batch
    iterations: int = 9000  # training steps (fewer when the wallclock cap stops the run)
    warmup_steps: int = 20  # compile warm-up steps (and as many looped ones), then model, optimizer, data rewound
    warmdown_iters: int = 3500  # LR decays linearly over the last N steps (their time, with the cap); 0: off
    warmdown_frac: float = 0.0  # LR decays linearly over the last fraction of training (SPEC_0409 §5); 0: off
    min_lr: float = 0.0  # floor of the LR multiplier once the warmdown has begun
    max_wallclock_seconds: float = 600.0  # training time cap; <= 0: no cap (warmdown by iterations)
    gptq_reserve_seconds: float = 0.0  # training stops this much before the cap (time left for GPTQ)
    train_batch_tokens: int = 786432  # tokens per optimizer step, over all ranks and micro-steps
    train_seq_len: int = 2048  # training sequence length
    eval_seq_len: int = 2048  # final evals' window length; <= 0: same as train_seq_len
    val_batch_size: int = 524288  # tokens per validation step of the periodic evals, over all ranks
    val_loss_every: int = 4000  # validation at step 0, every N steps and at the end; 0: only at the end
    train_log_every: int = 500  # train_loss line every N steps (and steps 1-10); 0: none after step 10
    # Model
    vocab_size: int = 1024  # must equal the tokenizer's vocabulary size
    num_layers: int = 11  # transformer blocks
    model_dim: int = 512  # residual width
    num_heads: int = 8  # query heads
    num_kv_heads: int = 4  # key/value heads (GQA); divides NUM_HEADS
    mlp_mult: float = 3.0  # MLP hidden width = MLP_MULT * MODEL_DIM
    tie_embeddings: bool = True  # the output head is the token embedding
    tied_embed_init_std: float = 0.005  # init std of the token embedding
    rope_base: float = 10000.0  # RoPE base
    rope_dims: int = 16  # leading dims of each head that RoPE rotates (partial RoPE)
    logit_softcap: float = 30.0  # logits = cap * tanh(logits / cap)
    qk_gain_init: float = 1.5  # initial per-head query gain
    xsa_last_n: int = 4  # exclusive self-attention (XSA) on the last N blocks
    ln_scale: bool = True  # scale block i's norm outputs by 1/sqrt(i + 1)
    rope_train_seq_len: int = 1024  # longer sequences get an NTK-scaled RoPE base; <= 0: TRAIN_SEQ_LEN
    rope_bf16: bool = False  # SPEC_0409 §0.7: theta rounded to bf16 up to that length, as the record's compiled table
    rope_ntk: bool = True  # 0: no NTK rescale at any length (SPEC_0427 §4: packed rows of 98,304 tokens)
    num_loops: int = 0  # depth recurrence: blocks LOOP_START..LOOP_END run 1 + NUM_LOOPS times once looping is on
    loop_start: int = 3  # first looped block
    loop_end: int = 5  # last looped block (inclusive)
    enable_looping_at: float = 0.35  # looping switches on at this training fraction, and stays on
    parallel_residual_start: int = -1  # blocks from this index on add attention and MLP of one input; < 0: none
    parallel_start_layer: int = -1  # decoder blocks from this index on run two lanes (SPEC_0427 §4); < 0: none
    skip_gates_enabled: bool = False  # U-Net skips as x = g x + (1 - g) w s with g = sigmoid(gate), not x + w s
    init_linear_draws: bool = False  # SPEC_0409 §4: draw each block matrix's nn.Linear default init first
    init_mlp_after_attention: bool = False  # SPEC_0427 §12: orthogonal Q, K, V of all layers, then all MLP-ups
    bigram_enabled: bool = True  # BigramHash embedding added to the token embedding
    smear_enabled: bool = True  # SmearGate: mix each position with the previous one
    smear_gate_enabled: bool = False  # 04-27 SmearGate on the embedding: x_t += lam sigmoid(w x_t[:GATE_WINDOW]) x_t-1
    smear_gate_bos_mask: bool = True  # 04-27 SmearGate: never into a BOS from the previous document (0: as PR #1797)
    sparse_attn_gate_enabled: bool = False  # head h's output times sigmoid(SCALE W_h x[:GATE_WINDOW]), x its input
    sparse_attn_gate_scale: float = 0.5  # SCALE of the sparse attention gate
    gate_window: int = 12  # leading input dims that the 04-27 SmearGate and sparse attention gate read
    bigram_vocab_size: int = 1536  # BigramHash buckets
    bigram_dim: int = 128  # BigramHash embedding width
    ve_enabled: bool = True  # value embeddings on VE_LAYERS
    ve_dim: int = 128  # value-embedding width
    ve_layers: str = "9,10"  # comma-separated block indices that get a value embedding
    # Optimizers
    matrix_lr: float = 0.025  # Muon LR of the bank matrices
    scalar_lr: float = 0.025  # Adam LR of scalars, vectors and control tensors
    tied_embed_lr: float = 0.035  # Adam LR of the tied embedding
    embed_lr: float = 0.6  # untied embeddings only
    head_lr: float = 0.008  # untied head only
    muon_momentum: float = 0.99  # Muon momentum after its warm-up
    muon_momentum_warmup_start: float = 0.92  # Muon momentum at step 0
    muon_momentum_warmup_steps: int = 1500  # steps of the linear momentum warm-up
    muon_backend_steps: int = 5  # Newton-Schulz iterations per Muon step
    muon_ns_coefficients: str = "quintic"  # Newton-Schulz polynomials: quintic (SPEC §5), polar_express (0427 §6.3)
    muon_row_normalize: bool = False  # MuonEq-R: each row of the Nesterov update to unit norm before NS5
    muon_dtype: str = "bf16"  # CUDA: dtype of Muon's reduced grads and momentum (bf16, fp32); CPU: fp32
    muon_wd: float = 0.04  # Muon decoupled weight decay
    adam_wd: float = 0.04  # Adam decoupled weight decay of the scalars and small matrices
    embed_wd: float = 0.04  # Adam decoupled weight decay of the embeddings
    beta1: float = 0.9  # Adam beta1
    beta2: float = 0.95  # Adam beta2
    adam_eps: float = 1e-8  # Adam epsilon
    grad_clip_norm: float = 0.3  # <= 0: no clipping
    grad_clip_scope: str = "local"  # local: each rank's grads before the reduction (2026-03-23); reduced: after
    # Weight averaging and QAT (training side; applied at the end of the run)
    ema_enabled: bool = True  # evaluate and export the EMA of the weights
    ema_decay: float = 0.997  # EMA decay per step
    swa_enabled: bool = False  # 1: export the mean of SWA snapshots instead of the EMA
    swa_every: int = 50  # SWA snapshot every N steps once the LR scale is below 0.2
    qat_enabled: bool = False  # int6 fake quantization of the CastedLinear weights from step 0
    late_qat_threshold: float = 0.15  # turn that QAT on once the LR scale falls below this; 0: never
    # End of run: artifact, sliding-window eval, legal score-first TTT (SPEC §7-§8)
    compressor: str = "brotli"  # artifact: pergroup (rANS per role and shape, SPEC_0427 §9), brotli, lzma
    byte_shuffle: bool = False  # BSHF: compress the torch.save's even-offset bytes, then its odd ones (SPEC_0409 §7.6)
    eval_stride: int = 64  # sliding stride: each window after the first scores its last EVAL_STRIDE targets
    eval_batch_seqs: int = 32  # windows per forward in the final evals and TTT scoring
    roundtrip_eval: bool = True  # the reloaded artifact's plain eval (a diagnostic where TTT gives the score); 0: none
    sliding_eval: bool = True  # the artifact's sliding-window eval (a diagnostic where TTT gives the score); 0: none
    control_tensor_name_patterns: str = ("attn_scale,attn_scales,mlp_scale,mlp_scales,resid_mix,resid_mixes,q_gain,"
                                         "skip_weight,skip_weights,smear,dtg_gate,ve_layer_scales,ve_shared.scale,"
                                         "attn_gate,vr_lambda")  # names of the control tensors, kept fp32 (SPEC §4)
    artifact_limit_strict: bool = False  # exit non-zero when code + artifact bytes exceed 16,000,000
    quantizer: str = "rowclip"  # rowclip: SPEC §7.4-§7.6 (int6 clip search, int8); gptq: SPEC_0409 §7.3-§7.5
    matrix_bits: int = 6  # gptq: bits of every large matrix outside the embed category
    embed_bits: int = 8  # gptq: bits of tok_emb (and of an untied lm_head)
    matrix_clip_sigmas: float = 12.85  # gptq SDClip: a row's grid spans +-k * std(row)
    embed_clip_sigmas: float = 20.0  # gptq SDClip k of the embed category
    mlp_clip_sigmas: float = 0.0  # gptq SDClip k of the .mlp. matrices; 0: MATRIX_CLIP_SIGMAS
    attn_clip_sigmas: float = 0.0  # gptq SDClip k of the .attn. matrices; 0: MATRIX_CLIP_SIGMAS
    attn_gate_int8: bool = False  # gptq: attn_gate_w int8 per row, scale max|W_r|/127 (SPEC_0427 §8.2); 0: fp16
    lqer_rank: int = 0  # gptq: rank of the LQER correction of the quantization error (SPEC_0427 §8.3); 0: none
    lqer_top_k: int = 3  # LQER corrects the tensors with the LQER_TOP_K largest errors ||W - q s||_F
    lqer_group: int = 64  # LQER: B's int4 scale groups (consecutive elements of the flattened B)
    gptq_calibration_batches: int = 64  # gptq: training micro-batches whose layer inputs give the Hessians
    gptq_calibration_loader: str = "train"  # gptq: their order: train (TRAIN_LOADER's) or shuffled (SPEC_0427 §8.1)
    final_eval: bool = True  # 0: stop after training and the peak-memory line (benchmarks of the train loop)
    ttt_enabled: bool = True  # legal score-first test-time training after the sliding-window eval
    ttt_mode: str = "full"  # full: chunked full-model SGD (SPEC §8); lora_phased: per-document LoRA (SPEC_0427 §10)
    ttt_lr: float = 0.002  # SGD peak lr, cosine-decayed over the chunks (lora_phased: of the global SGD phases)
    ttt_epochs: int = 3  # passes over each already-scored chunk
    ttt_chunk_tokens: int = 32768  # targets per TTT chunk (lora_phased: per global SGD chunk)
    ttt_freeze_blocks: int = 0  # blocks 0..k-1 are not adapted (their own tensors and their bank rows)
    ttt_momentum: float = 0.9  # TTT SGD momentum
    ttt_batch_seqs: int = 32  # sequences per TTT training step (per rank)
    ttt_grad_clip: float = 1.0  # max global norm of the all-reduced TTT gradients
    ttt_lora_rank: int = 80  # lora_phased: rank r of each document's adapters
    ttt_lora_alpha: float = 144.0  # lora_phased: adapter outputs scaled by alpha / r
    ttt_lora_lr: float = 1e-4  # lora_phased: AdamW lr of the adapters (betas 0, 0.99; eps 1e-10)
    ttt_lora_wd: float = 0.5  # lora_phased: AdamW weight decay of the adapters
    ttt_doc_batch: int = 64  # lora_phased: documents per step, one adapter set each
    ttt_lora_chunk: int = 48  # lora_phased: targets of a document scored, then trained on, per step
    ttt_phase_docs: str = "833,1666,2500"  # lora_phased: global SGD on the scored documents after these many; "": none
    ttt_cuda_graphs: bool = True  # lora_phased, compiled on a GPU: LoRA steps replay CUDA graphs (recorded in warm-up)
    # Data path: background batch producers, pinned memory, side-stream H2D copies (SPEC §10)
    train_prefetch: bool = True  # build train micro-batches in a background thread (0: in the train loop)
    train_prefetch_queue: int = 2  # micro-batches the producer may hold ready
    train_copy_stream: bool = True  # CUDA: train H2D on a side stream, one micro-batch ahead
    train_loader: str = "sequential"  # sequential: 03-23 token stream; shuffled: 04-09 sequences; documents: 04-27 rows
    train_shuffle_seed: str = "rank"  # shuffled: rank (04-09 record: every SEED sees the same data) or rank_and_seed
    val_prefetch: bool = True  # build validation batches in a background thread
    val_prefetch_queue: int = 2  # validation batches the producer may hold ready
    val_copy_stream: bool = True  # CUDA: validation H2D on a side stream, one batch ahead
    # Runtime
    torch_compile: str = "auto"  # auto: on for CUDA, off for CPU; or 0/1
    attn_backend: str = "auto"  # auto, fa3, cudnn, flash, efficient or math (SDPA backends)
    doc_attn_backend: str = "auto"  # packed rows: auto, fa3_varlen, fa4_varlen, torch_varlen, flex or sdpa (a mask)
    qk_kernel: str = "auto"  # attention inputs (one q/k/v GEMM + fused norm/RoPE) and XSA: triton, torch, auto
    mlp_kernel: str = "auto"  # MLP with LeakyReLU^2 inside the up/down GEMMs: triton (fused), torch, auto
    ce_kernel: str = "auto"  # training loss: triton (fused softcapped cross-entropy, SPEC_0427 §6.5), torch, auto
    @classmethod
    def from_env(cls, environ) -> "Hyperparameters":
        """RECIPE's table, then every field set in `environ`; collect all parse errors, then all cross-field errors."""
        recipe = environ.get("RECIPE", cls.recipe)
        if recipe not in RECIPES:
            raise ConfigError(["RECIPE=%r: expected one of %s" % (recipe, ", ".join(RECIPES))])
        values, errors = dict(RECIPES[recipe]), []
        for f in (f for f in fields(cls) if f.name.upper() in environ):
            raw = environ[f.name.upper()]
            try:
                values[f.name] = _parse_env_value(raw, f.type)
            except ValueError as exc:
                errors.append("%s=%r: expected %s (%s)" % (f.name.upper(), raw, ENV_TYPE_LABELS[f.type], exc))
        if errors:
            raise ConfigError(errors)
        h = cls(**dict(values, run_id=values.get("run_id") or str(uuid.uuid4())))
        h.validate()
        return h
    def validate(self) -> None:
        """Raises one ConfigError listing every cross-field problem: a table of (failed, message) rows, then bounds."""
        heads, length, patterns = max(self.num_heads, 1), self.effective_eval_seq_len, self.control_tensor_name_patterns
        head_dim, divisible = self.model_dim // heads, self.model_dim % heads == 0
        stride_max = min(length, self.train_seq_len) if self.ttt_enabled else length
        defaults = dict({f.name: f.default for f in fields(self)}, **RECIPES.get(self.recipe, {}))
        gptq_set = [name.upper() for name in GPTQ_FIELDS if getattr(self, name) != defaults[name]]
        try:
            layers = self.ve_layer_indices
            ve_bad = any(not 0 <= i < self.num_layers for i in layers) or len(set(layers)) != len(layers)
            ve_error = "VE_LAYERS=%r must be distinct layer indices in [0, %d)" % (self.ve_layers, self.num_layers)
        except ValueError:
            ve_bad, ve_error = True, "VE_LAYERS=%r: expected comma-separated integers like '9,10'" % self.ve_layers
        phases = [part.strip() for part in self.ttt_phase_docs.split(",") if part.strip()]
        phases_bad = not all(map(str.isdigit, phases)) or any(int(b) <= int(a) for a, b in zip(["0"] + phases, phases))
        lanes = [tuple([i >= self.parallel_start_layer for i in part] for part in order) for order in
                 layer_orders(self).values()]  # per looping mode, (encoder, decoder) blocks that would run two lanes
        gates = self.smear_gate_enabled or self.sparse_attn_gate_enabled
        rows = [
            (not divisible, "MODEL_DIM=%d must be divisible by NUM_HEADS=%d" % (self.model_dim, self.num_heads)),
            (divisible and head_dim % 2 != 0, "head dim MODEL_DIM/NUM_HEADS=%d must be even (RoPE)" % head_dim),
            (divisible and head_dim % 2 == 0 and (not 0 < self.rope_dims <= head_dim or self.rope_dims % 2),
             "ROPE_DIMS=%d must be even and in (0, head_dim=%d]" % (self.rope_dims, head_dim)),
            (self.num_kv_heads <= 0 or self.num_heads % self.num_kv_heads != 0,
             "NUM_HEADS=%d must be a multiple of NUM_KV_HEADS=%d" % (self.num_heads, self.num_kv_heads)),
            (ve_bad, ve_error),
            (stride_max > 0 and not 0 < self.eval_stride <= stride_max,  # stride_max <= 0: the lengths are blamed
             "EVAL_STRIDE=%d must be in [1, %d] (the eval window length%s)"
             % (self.eval_stride, stride_max, ", and TRAIN_SEQ_LEN: TTT's windows" if self.ttt_enabled else "")),
            (self.ttt_enabled and self.ttt_chunk_tokens < self.train_seq_len, "TTT_CHUNK_TOKENS=%d must be >= "
             "TRAIN_SEQ_LEN=%d: a shorter chunk holds no TTT training sequence"
             % (self.ttt_chunk_tokens, self.train_seq_len)),
            (phases_bad, "TTT_PHASE_DOCS=%r: expected increasing positive integers like '833,1666,2500', or empty"
             % self.ttt_phase_docs),
            (self.ttt_mode == "lora_phased" and self.ttt_lora_chunk > length, "TTT_LORA_CHUNK=%d must be <= "
             "EVAL_SEQ_LEN=%d (a chunk's context)" % (self.ttt_lora_chunk, length)),
            (patterns and any(not part.strip() for part in patterns.split(",")),
             "CONTROL_TENSOR_NAME_PATTERNS=%r has an empty entry" % patterns),
            (self.train_shuffle_seed == "rank_and_seed" and self.seed < 0,
             "SEED=%d must be >= 0 with TRAIN_SHUFFLE_SEED=rank_and_seed (NumPy seeds are non-negative)" % self.seed),
            (self.train_loader != "shuffled" and self.train_shuffle_seed != "rank", "TRAIN_SHUFFLE_SEED=%s applies to "
             "TRAIN_LOADER=shuffled only, not %s" % (self.train_shuffle_seed, self.train_loader)),
            (not self.packed_rows and self.doc_attn_backend != "auto", "DOC_ATTN_BACKEND=%s applies to "
             "TRAIN_LOADER=documents or TTT_MODE=lora_phased only" % self.doc_attn_backend),
            (self.rope_ntk and (self.train_loader == "documents" or self.ttt_mode == "lora_phased"),
             "TRAIN_LOADER=documents and TTT_MODE=lora_phased need ROPE_NTK=0: packed rows of many documents would "
             "get an NTK-rescaled RoPE base (SPEC_0427 §0.15)"),
            (self.parallel_residual_start >= 0 and self.parallel_start_layer >= 0, "PARALLEL_RESIDUAL_START=%d and "
             "PARALLEL_START_LAYER=%d: set one of them (the other to -1)"
             % (self.parallel_residual_start, self.parallel_start_layer)),
            (self.parallel_start_layer >= 0 and any(any(enc) or dec != sorted(dec) for enc, dec in lanes),
             "PARALLEL_START_LAYER=%d: two lanes run in the decoder's tail only, after every encoder and looped block"
             % self.parallel_start_layer),
            (gates and not 0 < self.gate_window <= self.model_dim,
             "GATE_WINDOW=%d must be in [1, MODEL_DIM=%d]" % (self.gate_window, self.model_dim)),
            (not self.smear_gate_enabled and not self.smear_gate_bos_mask,
             "SMEAR_GATE_BOS_MASK=0 applies to SMEAR_GATE_ENABLED=1 only"),
            (self.warmdown_iters > 0 and self.warmdown_frac > 0, "WARMDOWN_ITERS=%d and WARMDOWN_FRAC=%s: set one "
             "of them (the other to 0)" % (self.warmdown_iters, self.warmdown_frac)),
            (self.gptq_reserve_seconds < 0 or 0 < self.max_wallclock_seconds <= self.gptq_reserve_seconds,
             "GPTQ_RESERVE_SECONDS=%s must be >= 0 and below MAX_WALLCLOCK_SECONDS=%s"
             % (self.gptq_reserve_seconds, self.max_wallclock_seconds)),
            (self.num_loops > 0 and not 0 <= self.loop_start <= self.loop_end < self.num_layers, "LOOP_START=%d and "
             "LOOP_END=%d must satisfy 0 <= LOOP_START <= LOOP_END < NUM_LAYERS=%d"
             % (self.loop_start, self.loop_end, self.num_layers)),
            (self.quantizer != "gptq" and bool(gptq_set), "%s apply to QUANTIZER=gptq only, not %s"
             % (", ".join(gptq_set), self.quantizer)),
            (self.compressor != "lzma" and brotli is None, "COMPRESSOR=%s needs the brotli module, which this "
             "Python (%s) lacks: pip install brotli, or set COMPRESSOR=lzma" % (self.compressor, sys.executable)),
            (self.compressor == "pergroup" and constriction is None, "COMPRESSOR=pergroup needs the constriction "
             "module, which this Python (%s) lacks: pip install constriction, or set COMPRESSOR=brotli"
             % sys.executable)]
        bounds = {  # "NAME=value must be <bound>" for each name whose value fails the bound's test
            "> 0": (lambda v: v > 0, "num_layers num_heads vocab_size train_seq_len train_batch_tokens val_batch_size "
                    "bigram_dim ve_dim muon_backend_steps swa_every logit_softcap ttt_lr "
                    "ttt_grad_clip matrix_clip_sigmas embed_clip_sigmas ttt_lora_alpha ttt_lora_lr ttt_lora_chunk"),
            ">= 0 (0: MATRIX_CLIP_SIGMAS)": (lambda v: v >= 0, "mlp_clip_sigmas attn_clip_sigmas"),
            ">= 1": (lambda v: v >= 1, "train_prefetch_queue val_prefetch_queue eval_batch_seqs ttt_chunk_tokens "
                     "ttt_batch_seqs ttt_epochs gptq_calibration_batches checkpoint_keep ttt_lora_rank ttt_doc_batch "
                     "lqer_top_k lqer_group"),
            ">= 2": (lambda v: v >= 2, "bigram_vocab_size"),
            ">= 0": (lambda v: v >= 0, "warmup_steps iterations num_loops checkpoint_every ttt_lora_wd lqer_rank"),
            "in (0, 1)": (lambda v: 0 < v < 1, "ema_decay"), "in [0, 1)": (lambda v: 0 <= v < 1, "ttt_momentum"),
            "in [0, 1]": (lambda v: 0 <= v <= 1, "warmdown_frac enable_looping_at"),
            "in [0, 1] (a floor of the LR multiplier)": (lambda v: 0 <= v <= 1, "min_lr"),
            "in [0, NUM_LAYERS=%d]" % self.num_layers: (lambda v: 0 <= v <= self.num_layers,
                                                         "xsa_last_n ttt_freeze_blocks"),
            "in [2, 8] (q is stored as int8)": (lambda v: 2 <= v <= 8, "matrix_bits embed_bits")}
        errors = [message for failed, message in rows if failed]
        errors += ["%s=%r: expected one of %s" % (name.upper(), getattr(self, name), ", ".join(allowed))
                   for name, allowed in CHOICES.items() if getattr(self, name) not in allowed]
        errors += ["%s=%s must be %s" % (name.upper(), getattr(self, name), bound) for bound, (test, names)
                   in bounds.items() for name in names.split() if not test(getattr(self, name))]
        if errors:
            raise ConfigError(errors)
    def validate_for_world(self, world_size: int) -> None:
        """The launch's checks: WORLD_SIZE divides 8 and each of the 8 micro-batches holds whole sequences."""
        if world_size <= 0 or 8 % world_size != 0:
            raise ConfigError(["WORLD_SIZE=%d must divide 8 (grad_accum_steps = 8 / WORLD_SIZE)" % world_size])
        micro_batch = self.train_batch_tokens // 8  # world_size * grad_accum_steps = 8 micro-batches per step
        rows = [(self.train_batch_tokens % 8 != 0, "TRAIN_BATCH_TOKENS=%d must be divisible by "
                 "world_size*grad_accum_steps=8" % self.train_batch_tokens),
                (self.train_batch_tokens % 8 == 0 and micro_batch % self.train_seq_len != 0,
                 "TRAIN_BATCH_TOKENS/(world_size*grad_accum_steps)=%d must be a multiple of TRAIN_SEQ_LEN=%d"
                 % (micro_batch, self.train_seq_len)),
                (self.val_batch_size // 8 < self.train_seq_len, "VAL_BATCH_SIZE=%d gives no full sequence of "
                 "TRAIN_SEQ_LEN=%d per rank and micro-step" % (self.val_batch_size, self.train_seq_len))]
        errors = [message for failed, message in rows if failed]
        if errors:
            raise ConfigError(errors)
    ve_layer_indices = property(lambda self: tuple(int(part) for part in self.ve_layers.split(",") if part.strip())
                                if self.ve_enabled else ())
    effective_eval_seq_len = property(lambda self: self.eval_seq_len if self.eval_seq_len > 0 else self.train_seq_len)
    effective_rope_train_seq_len = property(
        lambda self: self.rope_train_seq_len if self.rope_train_seq_len > 0 else self.train_seq_len)
    # document-aware attention on packed rows: training (TRAIN_LOADER=documents) or the phased TTT's global SGD
    packed_rows = property(lambda self: self.train_loader == "documents" or (self.ttt_enabled and
                                                                             self.ttt_mode == "lora_phased"))
    train_files = property(lambda self: os.path.join(self.data_path, "fineweb_train_*.bin"))
    val_files = property(lambda self: os.path.join(self.data_path, "fineweb_val_[0-9]*.bin"))  # not _bytes_
    # training time in ms: the wallclock cap less GPTQ_RESERVE_SECONDS; None without a cap
    train_budget_ms = property(lambda self: 1000.0 * (self.max_wallclock_seconds - self.gptq_reserve_seconds)
                               if self.max_wallclock_seconds > 0 else None)

class RunFailure(Exception):
    """A named failure: main() prints `error: <message>` (no traceback) as the failing rank's last line, exit_code."""
    def __init__(self, message: str, exit_code: int = 1):
        super().__init__(message)
        self.exit_code = exit_code

class ConfigError(RunFailure, ValueError):
    """Refused settings (exit 2): every problem of one round, in one line."""
    def __init__(self, errors: List[str]):
        self.errors = list(errors)
        super().__init__("invalid configuration: " + "; ".join(self.errors), exit_code=2)

class DataError(RunFailure, ValueError):
    """A dataset, tokenizer or artifact file that cannot be used; the message names the file."""

class CheckpointError(RunFailure):
    """RESUME's checkpoint is missing, incomplete, corrupted or of another run's settings or world size."""

class RunStopped(KeyboardInterrupt):
    """SIGTERM/SIGINT stopped the run (exit 128 + signal number); the message is the log's last line."""
    def __init__(self, signum: int, where: str, checkpoint: str = ""):
        super().__init__("stopped: %s at %s UTC, %s; %s" % (
            signal.Signals(signum).name, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()), where,
            "checkpoint " + checkpoint if checkpoint else "no checkpoint (CHECKPOINT_ON_SIGNAL=1 saves one)"))
        self.exit_code = 128 + signum

class StopSignal:
    """The SIGTERM/SIGINT handler: raises RunStopped where the main thread is, unless the training loop defers it
    (CHECKPOINT_ON_SIGNAL=1); then it is only noted, and the loop saves a checkpoint at the step's end and stops."""
    def __init__(self):
        self.signum, self.deferred, self.where = None, False, "before training"
    def __call__(self, signum: int, frame) -> None:
        self.signum = signum
        if not self.deferred:
            raise RunStopped(signum, self.where)

ENV_TYPE_LABELS = {bool: "0/1/true/false", int: "an integer", float: "a number", str: "a string"}
ENV_BOOLEANS = {"1": True, "true": True, "yes": True, "on": True, "0": False, "false": False, "no": False, "off": False}

def _parse_env_value(raw: str, annotation):
    """`raw` as a value of the field type `annotation`; ValueError says why it is not one."""
    text = raw.strip()
    if annotation is bool and text.lower() not in ENV_BOOLEANS:
        raise ValueError("not a boolean")
    value = raw if annotation is str else ENV_BOOLEANS[text.lower()] if annotation is bool else annotation(text)
    if annotation is float and not math.isfinite(value):
        raise ValueError("not finite")
    return value

def suspicious_env_names(environ) -> List[str]:
    """Warnings for env vars that look like ours but are no field (the record's README set LATE_QAT, unread)."""
    known = sorted({f.name.upper() for f in fields(Hyperparameters)}
                   | {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"})
    warnings = []
    for name in sorted(set(environ) - set(known)):
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.85)
        if name.startswith(ENV_PREFIXES_OF_OURS) or close:
            warnings.append("%s=%s is not a setting of this script and is IGNORED%s"
                            % (name, environ[name], " (did you mean %s?)" % close[0] if close else ""))
    return warnings

def settings_help() -> str:
    """`train_gpt.py --help`: each setting's env name, type, default and the trailing comment of its field."""
    body = read_own_source().split("\nclass Hyperparameters:\n", 1)[1].split("\n    @", 1)[0]
    comments = dict(re.findall(r"^    (\w+): \w+ = [^#]*#\s*(.*)$", body, re.MULTILINE))  # the field's own line
    headings = {name: heading for heading, name in re.findall(r"^    # (.*)\n    (\w+):", body, re.MULTILINE)}
    lines = ["usage: torchrun --standalone --nproc_per_node=8 train_gpt.py  (one process: python train_gpt.py)",
             "Settings are environment variables (NUM_LAYERS=9 torchrun ...); the defaults are the 2026-03-23 "
             "record's run; [2026-04-09: ...] is RECIPE=2026-04-09's value where it differs (2026-04-27 likewise).",
             "Booleans take 0/1/true/false. Outputs: logs/<RUN_ID>.txt and logs/<RUN_ID>/."]
    for f in fields(Hyperparameters):
        if f.name in headings:
            lines += ["", headings[f.name] + ":"]
        recipes = "".join(" [%s: %s]" % (recipe, table[f.name]) for recipe, table in RECIPES.items()
                          if table.get(f.name, f.default) != f.default)
        lines.append("  %-28s %-5s %s [default: %s]%s" % (f.name.upper(), f.type.__name__, comments.get(f.name, ""),
                                                            f.default if f.default != "" else '""', recipes))
    return "\n".join(lines)

# ==== 2. DISTRIBUTED RUNTIME AND LOGGING ====
@dataclass(frozen=True)
class DistInfo:
    rank: int
    world_size: int
    device: torch.device
    is_main = property(lambda self: self.rank == 0)
    distributed = property(lambda self: self.world_size > 1)
    grad_accum_steps = property(lambda self: 8 // self.world_size)
    is_cuda = property(lambda self: self.device.type == "cuda")

def init_distributed(environ) -> DistInfo:
    """torchrun env (RANK, WORLD_SIZE, LOCAL_RANK) -> process group: NCCL on CUDA, gloo on CPU."""
    launched = "RANK" in environ and "WORLD_SIZE" in environ
    local_rank = int(environ.get("LOCAL_RANK", "0")) if launched else 0
    info = DistInfo(int(environ["RANK"]) if launched else 0, int(environ["WORLD_SIZE"]) if launched else 1,
                    torch.device("cuda", local_rank) if torch.cuda.is_available() else torch.device("cpu"))
    if info.is_cuda:  # TF32 matmuls and convolutions, as the record ran
        torch.cuda.set_device(info.device)
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    if launched:
        dist.init_process_group(backend="nccl" if info.is_cuda else "gloo",
                                device_id=info.device if info.is_cuda else None)
    return info

def all_reduce_(tensor: Tensor, dist_info: DistInfo, op: str = "sum") -> Tensor:
    if dist_info.distributed:
        dist.all_reduce(tensor, op=getattr(dist.ReduceOp, op.upper()))
    return tensor

def values_by_rank(value: float, dist_info: DistInfo) -> List[float]:
    """Every rank's value, by rank (one all-reduce of one-hot vectors)."""
    one_hot = torch.arange(dist_info.world_size, device=dist_info.device) == dist_info.rank
    return all_reduce_(one_hot.double() * value, dist_info).tolist()

def barrier(dist_info: DistInfo) -> None:
    if dist_info.distributed:
        dist.barrier()

def sync_device(dist_info: DistInfo) -> None:
    if dist_info.is_cuda:
        torch.cuda.synchronize(dist_info.device)

def ceil_div(numerator: int, denominator: int) -> int:
    return -(-numerator // denominator)

def rank_range(count: int, dist_info) -> tuple:
    """This rank's contiguous share [count*r/W, count*(r+1)/W) of `count` items."""
    return (count * dist_info.rank // dist_info.world_size, count * (dist_info.rank + 1) // dist_info.world_size)

def compile_enabled(h: Hyperparameters, dist_info: DistInfo) -> bool:
    return h.torch_compile == "1" or (h.torch_compile == "auto" and dist_info.is_cuda)

def autocast_context(dist_info: DistInfo):
    return torch.autocast(device_type="cuda", dtype=torch.bfloat16) if dist_info.is_cuda else contextlib.nullcontext()

class Logger:
    """Rank 0 logs to the console and logs/<run_id>.txt; an existing log or outputs folder of that name is refused,
    except by a resume, which appends to its run's log."""
    def __init__(self, dist_info: DistInfo, log_dir: str, run_id: str, resume: bool = False):
        self.path, self.output_dir = os.path.join(log_dir, run_id + ".txt"), os.path.join(log_dir, run_id)
        self._file = None
        if dist_info.is_main:
            os.makedirs(log_dir, exist_ok=True)
            taken = [path for path in (self.path, self.output_dir) if os.path.exists(path)]
            if taken and not resume:
                raise ConfigError(["RUN_ID=%s: %s already exists (an earlier run's): choose another RUN_ID or move "
                                   "it away" % (run_id, taken[0])])
            self._file = open(self.path, "a" if resume else "x", encoding="utf-8")  # "x": not another run's log
            print("logfile:" + self.path, flush=True)
    def log(self, msg: str, console: bool = True) -> None:
        if self._file is not None:
            for stream in (sys.stdout, self._file) if console else (self._file,):
                print(msg, file=stream, flush=True)
    def close(self) -> None:
        if self._file is not None:
            self._file.close()

def log_run_header(logger: Logger, h: Hyperparameters, code: str, code_bytes: int, environ, unstripped: int) -> None:
    """File-only: code sha256, the source, versions, nvidia-smi, the config; then the warnings and the byte budget."""
    logger.log("code_sha256:" + hashlib.sha256(code.encode("utf-8")).hexdigest())
    try:
        smi = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=20, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        smi = "nvidia-smi: not available"
    rule = "=" * 100
    for text in [code, rule, "Running Python " + sys.version, "Running PyTorch " + torch.__version__, smi, rule] + [
            "config:%s=%s" % (f.name, getattr(h, f.name)) for f in fields(h)]:
        logger.log(text, console=False)
    for warning in suspicious_env_names(environ):
        logger.log("WARNING unknown_env: " + warning)
    logger.log("code_bytes:%d code_bytes_readable:%d limit_bytes:%d model_headroom_bytes:%d code_bytes_unstripped:%d"
               % (code_bytes, len(code.encode("utf-8")), ARTIFACT_LIMIT_BYTES, ARTIFACT_LIMIT_BYTES - code_bytes,
                  unstripped))
    if brotli is None:
        logger.log("WARNING code_bytes: without the brotli module the packed file cannot be made, so code_bytes "
                   "counts the readable file; records.make counts the packed one and will refuse this log")

# The counted form of this file (records.pack writes it; code_bytes is its size): strip_source(source), brotli + base85,
# run after a sha256 check under "<FILE>" with its lines in linecache, where Triton's @jit and tracebacks read them.
PACKED_TEMPLATE = """\
# train_gpt.py packed (brotli, base85); the readable source: python3 -m records.pack unpack FILE
import base64,brotli,hashlib,io,linecache,sys,traceback
_f,_h="<%s>"%__file__,"{sha256}"
try:_p="{payload}";_b=base64.b85decode(_p);_s=brotli.decompress(_b).decode();_ok=base64.b85encode(_b).decode()\
==_p and hashlib.sha256(_s.encode()).hexdigest()==_h
except Exception:_ok=0
if not _ok:raise SystemExit("%s: the packed source does not decode to sha256 %s: the file was edited after \
packing"%(__file__,_h))
linecache.cache[_f]=len(_s),None,io.StringIO(_s).readlines(),_f
if __name__=="__main__":sys.excepthook=traceback.print_exception
exec(compile(_s,_f,"exec"))
"""

def pack_source(source: str) -> bytes:
    """The counted file that runs `source` (read with universal newlines); fixed settings: same source, same bytes."""
    if "\r" in source:  # compile() would count a lone CR as a line break, linecache would not
        raise ValueError("pack_source: the source holds CR characters; pass the text read with universal newlines")
    data = source.encode("utf-8")
    compressed = brotli.compress(data, mode=brotli.MODE_GENERIC, quality=11, lgwin=22, lgblock=0)
    return PACKED_TEMPLATE.format(sha256=hashlib.sha256(data).hexdigest(),
                                  payload=base64.b85encode(compressed).decode("ascii")).encode("ascii")

def strip_source(source: str) -> str:
    """`source` without comments and string statements (docstrings; each becomes `0`), every line where it was, so
    a traceback's line numbers are the readable file's; class Hyperparameters keeps its comments (settings_help)."""
    lines = source.splitlines(keepends=True)
    keep = range(*(source[:source.find(m)].count("\n") + 1 for m in ("\nclass Hyperparameters:", "\n    @classmethod")))
    tokens = [t for t in tokenize.generate_tokens(io.StringIO(source).readline) if t.type != tokenize.NL]
    for before, token, after in reversed(list(zip([None] + tokens, tokens, tokens[1:]))):
        row, col = token.start
        if token.type == tokenize.COMMENT and row - 1 not in keep:
            lines[row - 1] = lines[row - 1][:col].rstrip() + "\n"
        elif token.type == tokenize.STRING and after.type == tokenize.NEWLINE and (before is None or before.type in (
                tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT)):
            end_row, end_col = token.end
            lines[row - 1:end_row] = [lines[row - 1][:col] + "0" + lines[end_row - 1][end_col:]] + ["\n"] * (
                end_row - row)
    return "".join(lines)

def read_own_source() -> str:
    """The running source: a packed file registered it in linecache; a readable one linecache reads from disk."""
    filename = read_own_source.__code__.co_filename
    linecache.checkcache(filename)
    source = "".join(linecache.getlines(filename))
    if not source:
        raise RuntimeError("cannot read the running source %s" % filename)
    return source

# ==== 3. DATA ====
SHARD_MAGIC, SHARD_VERSION, SHARD_HEADER_BYTES = 20240520, 1, 256 * 4  # SPEC §2: 256 int32 header words

class ShardFormatError(DataError):
    """A token shard that breaks SPEC §2 (header, size or read); the message starts with the file's path."""

def _read_shard_header(path: str, file) -> int:
    """The token count N of an open shard, after checking its header and its size."""
    size, header = os.fstat(file.fileno()).st_size, file.read(SHARD_HEADER_BYTES)
    if len(header) != SHARD_HEADER_BYTES:
        raise ShardFormatError(f"{path}: {size} bytes, shorter than the {SHARD_HEADER_BYTES}-byte header")
    magic, version, num_tokens = (int(word) for word in np.frombuffer(header, dtype="<i4")[:3])
    if magic != SHARD_MAGIC:
        raise ShardFormatError(f"{path}: bad magic {magic}, expected {SHARD_MAGIC}")
    if version != SHARD_VERSION:
        raise ShardFormatError(f"{path}: unsupported version {version}, expected {SHARD_VERSION}")
    if num_tokens < 0 or size != SHARD_HEADER_BYTES + 2 * num_tokens:
        raise ShardFormatError(f"{path}: size {size} bytes, but the header's token count {num_tokens} needs "
                               f"{SHARD_HEADER_BYTES} + 2*{num_tokens} = {SHARD_HEADER_BYTES + 2 * num_tokens}")
    return num_tokens

def load_data_shard(path: str) -> np.ndarray:
    """A whole shard as uint16 tokens; a bad header, a wrong size or a short read is a ShardFormatError."""
    with open(path, "rb") as file:
        num_tokens = _read_shard_header(path, file)
        tokens = np.empty(num_tokens, dtype="<u2")
        bytes_read = file.readinto(tokens.view(np.uint8))
    if bytes_read != 2 * num_tokens:
        raise ShardFormatError(f"{path}: short read, {bytes_read} of {2 * num_tokens} token bytes")
    return tokens

def list_shards(pattern: str, what: str) -> List[str]:
    """The sorted shard paths matching `pattern` (SPEC §2); none is an error naming the pattern."""
    paths = sorted(glob.glob(pattern))
    if not paths:
        raise DataError(f"no {what} shards match {pattern} (set DATA_PATH, or build data: see README)")
    return paths

# A train host source yields (x, y, state): passed back as make_train_loader's `state`, `state` restarts the source
# right after that batch (DeviceBatchFeed.state_dict() is the state of the last batch handed out; checkpoints).
def sequential_host_batches(paths: Sequence[str], dist_info, rows: int, seq_len: int,
                            pin_memory: bool, state: Sequence[int] = (0, 0)) -> Iterator[tuple]:
    """SPEC §3 micro-batches of rank r: CPU int64 (x, y) of (rows, seq_len), views of the r-th of the world_size spans
    of rows * seq_len + 1 tokens of a micro-step (only it is copied); shards load when first needed, the list wraps.
    state: (shard index, token position) where the next micro-step starts."""
    span, (file_index, position) = rows * seq_len + 1, state
    tokens = load_data_shard(paths[file_index])
    mine, total = dist_info.rank * span, dist_info.world_size * span  # this rank's offset in a micro-step's tokens
    while True:
        buffer = torch.empty(span, dtype=torch.int64, pin_memory=pin_memory)
        done, loads_without_tokens = 0, 0
        while done < total:
            if position == len(tokens):  # this shard is used up: the next one
                loads_without_tokens += 1
                if loads_without_tokens > len(paths):
                    raise DataError(f"every train shard is empty: {paths}")
                file_index = (file_index + 1) % len(paths)
                tokens, position = load_data_shard(paths[file_index]), 0
                continue
            step = min(total - done, len(tokens) - position)
            start, stop = max(done, mine), min(done + step, mine + span)  # the part of this piece that is ours
            if start < stop:
                buffer.numpy()[start - mine:stop - mine] = tokens[position + start - done:position + stop - done]
            position, done, loads_without_tokens = position + step, done + step, 0
        yield buffer[:-1].view(rows, seq_len), buffer[1:].view(rows, seq_len), (file_index, position)

class ShuffledSequences:
    """One rank's sampler of SPEC_0409 §3, bit for bit: whole sequences of seq_len + 1 tokens at a random phase per
    shard, without replacement, from a shard drawn with probability proportional to the sequences it has left."""
    def __init__(self, paths: Sequence[str], seq_len: int, seed):
        self.paths, self.seq_len, self.rng = list(paths), seq_len, np.random.default_rng(seed)  # PCG64
        self.tokens = []  # memmaps, opened once: gather() only reads them
        for path in self.paths:
            with open(path, "rb") as file:
                num_tokens = _read_shard_header(path, file)
            if num_tokens < seq_len + 1:
                raise DataError(f"{path}: {num_tokens} tokens, fewer than the TRAIN_SEQ_LEN+1={seq_len + 1} of "
                                f"one training sequence (TRAIN_LOADER=shuffled reads whole sequences)")
            self.tokens.append(np.memmap(path, dtype="<u2", mode="r", offset=SHARD_HEADER_BYTES, shape=(num_tokens,)))
        self._reset_all()
    def _reset_all(self) -> None:
        """A fresh phase, then a fresh permutation, per shard in file order (SPEC_0409 §3's RNG call order)."""
        self.starts, self.reset_rng = [], self.rng.bit_generator.state
        for tokens in self.tokens:
            max_phase = min(self.seq_len - 1, max(0, len(tokens) - self.seq_len - 1))
            phase = int(self.rng.integers(max_phase + 1)) if max_phase > 0 else 0
            self.starts.append(phase + self.rng.permutation((len(tokens) - 1 - phase) // self.seq_len) * self.seq_len)
        self.left = np.array([len(starts) for starts in self.starts], dtype=np.float64)  # the record's choice weights
    def state_dict(self) -> dict:  # the RNG state before the last reset (it redraws the permutations), now, and left
        return {"reset_rng": self.reset_rng, "rng": self.rng.bit_generator.state, "left": self.left.tolist()}
    def load_state_dict(self, state: dict) -> None:
        self.rng.bit_generator.state = state["reset_rng"]
        self._reset_all()
        self.rng.bit_generator.state, self.left = state["rng"], np.array(state["left"], dtype=np.float64)
    def plan(self, rows: int) -> List[tuple]:
        """(shard, start) of the next `rows` sequences (all the RNG draws); a shard's starts pop from the end."""
        plan = []
        for _ in range(rows):
            if self.left.sum() <= 0:
                self._reset_all()
            shard = int(self.rng.choice(len(self.left), p=self.left / self.left.sum()))
            self.left[shard] -= 1
            plan.append((shard, int(self.starts[shard][int(self.left[shard])])))
        return plan
    def gather(self, plan: Sequence[tuple], out: np.ndarray) -> None:
        """Sequence k of `plan` into out[0, k] (x, cast to out's dtype) and, shifted by one token, out[1, k] (y)."""
        for row, (shard, start) in enumerate(plan):
            try:
                sequence = self.tokens[shard][start:start + self.seq_len + 1]
                out[0, row], out[1, row] = sequence[:-1], sequence[1:]
            except Exception as error:  # the consumer sees which file; the cause stays chained
                message = f"{self.paths[shard]}: reading the sequence at token {start} failed: {error}"
                raise DataError(message) from error

def shuffled_host_batches(sampler: ShuffledSequences, rows: int, pin_memory: bool) -> Iterator[tuple]:
    """SPEC_0409 §3 micro-batches, CPU int64 (x, y) of (rows, seq_len): halves of one buffer filled from memmaps."""
    while True:
        batch = torch.empty((2, rows, sampler.seq_len), dtype=torch.int64, pin_memory=pin_memory)
        sampler.gather(sampler.plan(rows), batch.numpy())
        yield batch[0], batch[1], sampler.state_dict()

BOS_ID = 1  # SPEC §2: every document in a shard starts with <s> (id 1)
CU_SEQLENS_BUCKET = 64  # SPEC_0427 §3: cu_seqlens padded to a multiple of 64 entries (few compiled shapes)

def document_cu_seqlens(tokens, bos_id: int, max_len: int, bucket: int) -> np.ndarray:
    """SPEC_0427 §3's segments of a packed row (T,): documents start at each BOS (and at 0), each is cut into pieces of
    <= max_len tokens counted from its start; int32 piece starts + [T], padded with T (empty trailing segments) to a
    multiple of `bucket` entries. Also for any packed stream of documents (TTT's document-aware phase)."""
    length, starts = len(tokens), np.flatnonzero(np.asarray(tokens) == bos_id)
    starts = starts if len(starts) and starts[0] == 0 else np.concatenate(([0], starts))
    counts = -(-np.diff(np.append(starts, length)) // max_len)  # pieces per document
    piece_index = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)  # within its document
    pieces = np.repeat(starts, counts) + piece_index * max_len
    cu_seqlens = np.full(ceil_div(len(pieces) + 1, bucket) * bucket, length, dtype=np.int32)
    cu_seqlens[:len(pieces)] = pieces
    return cu_seqlens

def first_document(path: str, tokens: np.ndarray, need: int) -> int:
    """Where a shard's first BOS is; a shard without one, or without `need` tokens from it, is a DataError."""
    for begin in range(0, len(tokens), 1 << 16):  # chunks: a memmap is read only up to the first BOS
        hits = np.flatnonzero(tokens[begin:begin + (1 << 16)] == BOS_ID)
        if len(hits):
            if begin + hits[0] + need > len(tokens):
                raise DataError(f"{path}: {len(tokens) - begin - hits[0]} tokens from its first BOS, fewer than the "
                                f"WORLD_SIZE*(TRAIN_BATCH_TOKENS/8+1)={need} of a micro-step (TRAIN_LOADER=documents)")
            return begin + int(hits[0])
    raise DataError(f"{path}: no BOS (id {BOS_ID}) in its {len(tokens)} tokens: TRAIN_LOADER=documents packs "
                    f"BOS-delimited documents")

def document_host_batches(shards: Sequence[tuple], dist_info, row_tokens: int, seq_len: int,
                          pin_memory: bool, state: Optional[Sequence[int]] = None) -> Iterator[tuple]:
    """SPEC_0427 §3 micro-batches of rank r from (path, memmap) shards: CPU x, y int64 (1, T) and int32 cu_seqlens
    (pieces <= seq_len). Every rank reads the same shard, in file order from its first BOS; a micro-step takes
    WORLD_SIZE spans of T + 1 tokens (rank r the r-th); a shard without room for the next one is left (its tail
    dropped), the list wraps; no RNG. Only the spans are read (no whole-shard load stalls the queue).
    state: (shard index, cursor) where the next micro-step starts (a checkpoint's)."""
    span, total = row_tokens + 1, dist_info.world_size * (row_tokens + 1)
    file_index, cursor = state or (0, first_document(*shards[0], total))
    path, tokens = shards[file_index]
    while True:
        if cursor + total > len(tokens):
            file_index = (file_index + 1) % len(shards)
            path, tokens = shards[file_index]
            cursor = first_document(path, tokens, total)
        buffer = torch.empty(span, dtype=torch.int64, pin_memory=pin_memory)
        buffer.numpy()[:] = tokens[cursor + dist_info.rank * span:cursor + (dist_info.rank + 1) * span]
        cursor += total
        cu_seqlens = torch.from_numpy(document_cu_seqlens(buffer.numpy()[:-1], BOS_ID, seq_len, CU_SEQLENS_BUCKET))
        yield (buffer[None, :-1], buffer[None, 1:], cu_seqlens.pin_memory() if pin_memory else cu_seqlens,
               (file_index, cursor))

class TrainingClock:
    """Training time in ms, paused for evaluations; loaders stamp it at each batch they read, so last_read_ms is
    when the last training token was read on it (SPEC_0427 §0.4: GPTQ calibration reads resume it)."""
    def __init__(self, elapsed_ms: float = 0.0):
        self.started, self.elapsed_ms, self.last_read_ms = None, elapsed_ms, 0.0
    def now_ms(self) -> float:
        return self.elapsed_ms + (0.0 if self.started is None else 1000.0 * (time.perf_counter() - self.started))
    def run(self, running: bool) -> float:
        """Starts (resumes) or pauses the clock; returns the training time so far."""
        self.elapsed_ms, self.started = self.now_ms(), time.perf_counter() if running else None
        return self.elapsed_ms
    def stamped(self, batches: Iterator[tuple]) -> Iterator[tuple]:
        for batch in batches:  # a read while paused gets the paused time; the compile warm-up's reads, 0
            self.last_read_ms = self.now_ms()
            yield batch

class BackgroundIterator:
    """`source` run in a daemon thread at most `depth` items ahead, in order; an exception (StopIteration at the end)
    reaches the consumer after the items made before it, and again on every later call. close() (also at exit: a
    daemon thread inside torch would abort the exit) stops the thread and waits until it has ended, or STOP_SECONDS:
    a producer stuck in a read (a stalled filesystem) is left behind, with a warning. Items and free slots pass
    through C-level SimpleQueues: RunStopped, raised wherever the main thread is, could leave a queue.Queue's
    lock held (just after its acquire, or at its __exit__), and close() would then wait for that lock for ever."""
    STOP_SECONDS = 10.0
    def __init__(self, source: Iterator, depth: int, device: torch.device, name: str):
        self.items, self.slots, self.stopped, self.end = queue.SimpleQueue(), queue.SimpleQueue(), False, None
        for _ in range(depth):
            self.slots.put(None)
        self.thread = threading.Thread(target=self._produce, args=(source, device), name=name, daemon=True)
        self.thread.start()
        atexit.register(self.close)
    def _produce(self, source: Iterator, device: torch.device) -> None:
        end = StopIteration()
        try:
            if device.type == "cuda":
                torch.cuda.set_device(device)  # else pinned allocations would create a context on cuda:0
            for item in source:  # tuples of tensors: never an exception
                self.slots.get()
                if self.stopped:
                    return
                self.items.put(item)
        except BaseException as error:  # handed to the consumer, which owns the process
            end = error
        self.items.put(end)
    def __next__(self):
        entry = self.end or self.items.get()
        if isinstance(entry, BaseException):
            self.end = entry
            raise entry
        self.slots.put(None)
        return entry
    def close(self) -> None:
        atexit.unregister(self.close)
        self.stopped = True
        self.slots.put(None)  # a producer waiting for room sees the stop
        self.thread.join(self.STOP_SECONDS)
        if self.thread.is_alive():
            print("WARNING %s: still running %.0fs after close() (stuck in a read?); left behind"
                  % (self.thread.name, self.STOP_SECONDS), file=sys.stderr, flush=True)
        self.items = queue.SimpleQueue()  # frees the (pinned) items

class DeviceBatchFeed(contextlib.AbstractContextManager, Iterator):
    """(host, device) tensor tuples of `source`, one batch ahead (building batch i+1 fails when batch i is asked for).
    With a copy stream, batch i+1's H2D is issued on it when batch i is handed out; compute waits on batch i's event
    and record_stream() stops the allocator reusing the memory early. Data wait: host time blocked in the source
    plus, on CUDA, timing events around each batch's wait or copy on the compute stream."""
    def __init__(self, source: Iterator, device: torch.device, use_copy_stream: bool):
        self.source, self.device, self.pending, self.closed, self.state = source, device, None, False, None
        self.copy_stream = torch.cuda.Stream(device) if device.type == "cuda" and use_copy_stream else None
        self.host_wait_seconds, self.event_pairs = 0.0, []
    def _fetch(self) -> tuple:
        """(host tensors, device copies, ready event, a train source's state) of the next item (copies: see below)."""
        start = time.perf_counter()
        item = next(self.source)  # tensors, then a train source's state (the non-tensor last entry)
        host, state = tuple(part for part in item if isinstance(part, Tensor)), item[-1]
        state = None if isinstance(state, Tensor) else state
        self.host_wait_seconds += time.perf_counter() - start
        if self.copy_stream is None:
            return host, None, None, state
        with torch.cuda.stream(self.copy_stream):
            copies = tuple(tensor.to(self.device, non_blocking=True) for tensor in host)
        return host, copies, self.copy_stream.record_event(), state
    def __next__(self) -> tuple:
        if self.closed:
            raise RuntimeError("batch feed is closed")
        host, copies, ready, self.state = self.pending or self._fetch()
        try:
            self.pending = self._fetch()
        except StopIteration:
            self.pending = None
        if self.device.type != "cuda":
            return host, host
        compute = torch.cuda.current_stream(self.device)
        before = compute.record_event(torch.cuda.Event(enable_timing=True))
        if ready is None:
            copies = tuple(tensor.to(self.device, non_blocking=True) for tensor in host)
        else:
            compute.wait_event(ready)
            for tensor in copies:
                tensor.record_stream(compute)
        self.event_pairs.append((before, compute.record_event(torch.cuda.Event(enable_timing=True))))
        return host, copies
    def next_batch(self) -> tuple:
        return next(self)[1]
    def state_dict(self):  # the source's state after the last batch handed out (the producer runs ahead)
        return self.state
    def wait_ms(self) -> float:
        """The data wait so far: host time blocked in the source + the compute stream's waits (syncs on the last)."""
        if self.event_pairs:
            self.event_pairs[-1][1].synchronize()
        self.host_wait_seconds += sum(before.elapsed_time(after) for before, after in self.event_pairs) / 1000.0
        self.event_pairs = []
        return 1000.0 * self.host_wait_seconds
    def close(self) -> None:  # idempotent
        self.closed, self.pending = True, None
        self.source.close()
    def __exit__(self, *exc_info) -> None:
        self.close()

def make_train_loader(h, dist_info, logger, clock: Optional[TrainingClock] = None, order: str = "train",
                      state=None) -> DeviceBatchFeed:
    """A loader from the start of the TRAIN_LOADER (or `order`'s) order, or from a state_dict()'s batch, its reads
    stamped on `clock` (feed.clock); to rewind, close() the old one first (no producer runs on)."""
    cuda, paths = dist_info.device.type == "cuda", list_shards(h.train_files, "train")
    order, clock = h.train_loader if order == "train" else order, clock or TrainingClock()
    pin_memory = cuda and h.train_prefetch  # the synchronous loader copies from pageable memory, as SPEC §3
    rows = h.train_batch_tokens // (dist_info.world_size * dist_info.grad_accum_steps) // h.train_seq_len
    if order == "documents":  # every shard checked before the first batch (a memmap read up to its first BOS)
        shards = []
        for path in paths:
            with open(path, "rb") as file:
                num_tokens = _read_shard_header(path, file)
            shards.append((path, np.memmap(path, "<u2", "r", SHARD_HEADER_BYTES, (num_tokens,))))
            first_document(*shards[-1], dist_info.world_size * (rows * h.train_seq_len + 1))
        batches = document_host_batches(shards, dist_info, rows * h.train_seq_len, h.train_seq_len, pin_memory, state)
        kind = f"documents shards:{len(paths)} row_tokens:{rows * h.train_seq_len} max_piece:{h.train_seq_len}"
    elif order == "shuffled":
        if len(paths) < dist_info.world_size:  # checked on every rank, so all of them stop with the same error
            raise DataError(f"TRAIN_LOADER=shuffled gives rank r the shards [r::WORLD_SIZE] of the {len(paths)} "
                            f"matching {h.train_files}: WORLD_SIZE={dist_info.world_size} needs at least that many")
        seed = dist_info.rank if h.train_shuffle_seed == "rank" else np.random.SeedSequence(h.seed, spawn_key=(
            dist_info.rank,))  # rank_and_seed: NumPy's spawn(WORLD_SIZE)[rank] of SeedSequence(SEED)
        sampler = ShuffledSequences(paths[dist_info.rank::dist_info.world_size], h.train_seq_len, seed)
        if state is not None:
            sampler.load_state_dict(state)
        batches = shuffled_host_batches(sampler, rows, pin_memory)
        kind = (f"shuffled shards:{len(sampler.paths)}/{len(paths)} sequences:{int(sampler.left.sum())} "
                f"seed:{h.train_shuffle_seed}")
    else:
        batches, kind = sequential_host_batches(paths, dist_info, rows, h.train_seq_len, pin_memory,
                                                state or (0, 0)), "sequential"
    batches = clock.stamped(batches)
    if h.train_prefetch:
        batches = BackgroundIterator(batches, h.train_prefetch_queue, dist_info.device, "train-batch-producer")
    copy_stream = cuda and h.train_copy_stream
    logger.log(f"train_data loader:{kind} prefetch:{int(h.train_prefetch)} prefetch_queue:{h.train_prefetch_queue} "
               f"pin_memory:{int(pin_memory)} copy_stream:{int(copy_stream)}"
               + ("" if cuda else " (device cpu: pinning and copy stream skipped)"))
    feed = DeviceBatchFeed(batches, dist_info.device, copy_stream)
    feed.clock = clock
    return feed

def make_val_feeder(h, dist_info, specs: Sequence, build: Callable) -> DeviceBatchFeed:
    """One eval pass: ((x_cpu, y_cpu), (x, y)) per spec, batch i+1 built (VAL_PREFETCH) and copied (VAL_COPY_STREAM)
    while batch i is evaluated; build(spec) -> this rank's (x, y) arrays."""
    pin_memory = dist_info.device.type == "cuda" and h.val_prefetch
    pairs = ((torch.as_tensor(part).contiguous() for part in build(spec)) for spec in specs)  # wraps NumPy, no copy
    host_batches = (tuple(part.pin_memory() if pin_memory else part for part in pair) for pair in pairs)
    if h.val_prefetch:
        host_batches = BackgroundIterator(host_batches, h.val_prefetch_queue, dist_info.device, "val-batch-producer")
    return DeviceBatchFeed(host_batches, dist_info.device, h.val_copy_stream)

# ==== 4. MODEL (PyTorch; section 5 swaps in fused Triton ops for the marked parts) ====
LEAKY_SLOPE = 0.5  # the record's LeakyReLU(0.5)^2 MLP activation
RMS_NORM_EPS = torch.finfo(torch.float32).eps  # F.rms_norm's default for bf16/fp32 inputs (computed in fp32)

def layer_orders(h: Hyperparameters) -> Dict[bool, Tuple[List[int], List[int]]]:
    """{looping: (encoder, decoder)} block indices (SPEC_0409 §4); the encoder is the first half, rounded down."""
    plain, looped = list(range(h.num_layers)), list(range(h.num_layers))
    if h.num_loops > 0:
        segment = list(range(h.loop_start, h.loop_end + 1))
        looped = plain[:h.loop_start] + segment * (h.num_loops + 1) + plain[h.loop_end + 1:]
    return {looping: (order[:len(order) // 2], order[len(order) // 2:])
            for looping, order in ((False, plain), (True, looped))}

class GPT(nn.Module):
    """U-Net GPT, block matrices in four banks (one Muon update each): qo_bank = [W_q x n, W_o x n], kv_bank =
    [W_k x n, W_v x n], mlp_up_bank, mlp_down_bank. Decoder step j adds the j-th latest encoder output (skip row j)."""
    def __init__(self, h: Hyperparameters):
        super().__init__()
        n, dim = h.num_layers, h.model_dim
        kv_dim, hidden = h.num_kv_heads * (dim // h.num_heads), int(h.mlp_mult * dim)
        self.num_layers, self.logit_softcap = n, h.logit_softcap
        self.rope_base, self.rope_dims, self.head_dim = h.rope_base, h.rope_dims, dim // h.num_heads
        self.rope_args = (h.effective_rope_train_seq_len if h.rope_ntk else math.inf, h.rope_bf16)
        self.rope_cache: Dict[tuple, Tuple[Tensor, ...]] = {}  # rope_tables(): one table per length, dtype, device
        packed = [h.train_batch_tokens // 8, h.val_batch_size // 8 // h.train_seq_len * h.train_seq_len,  # documents
                  h.eval_batch_seqs * h.train_seq_len, h.eval_batch_seqs * h.effective_eval_seq_len]  # and plain_eval
        self.rope_lengths = sorted({h.train_seq_len, h.effective_eval_seq_len,  # made before any compiled forward
                                    *(packed if h.train_loader == "documents" else ())})
        self.tok_emb = nn.Embedding(h.vocab_size, dim)
        self.bigram = ScaledEmbedding(h.bigram_vocab_size, h.bigram_dim, dim, 0.05) if h.bigram_enabled else None
        self.smear = SmearGate(dim) if h.smear_enabled else None
        self.smear_gate = TokenSmearGate(h.gate_window, h.smear_gate_bos_mask) if h.smear_gate_enabled else None
        self.smear_lambda = nn.Parameter(torch.zeros(1)) if h.smear_gate_enabled else None  # the record's names
        self.layer_orders, self.looping = layer_orders(h), False  # looping: set by training, on for the final evals
        skip_rows = min(len(part) for part in self.layer_orders[True])
        self.skip_weights = nn.Parameter(torch.ones(skip_rows, dim))
        self.skip_gates = nn.Parameter(torch.zeros(skip_rows, dim)) if h.skip_gates_enabled else None
        self.qo_bank = nn.Parameter(torch.empty(2 * n, dim, dim))
        self.kv_bank = nn.Parameter(torch.empty(2 * n, kv_dim, dim))
        self.mlp_up_bank = nn.Parameter(torch.empty(n, hidden, dim))
        self.mlp_down_bank = nn.Parameter(torch.empty(n, dim, hidden))
        self.blocks = nn.ModuleList(Block(h, i) for i in range(n))
        # two lanes (SPEC_0427 §4), per layer: post[j, k] weighs branch j (attention, MLP) into lane k; resid[k] lane k
        two_lanes = h.parallel_start_layer >= 0
        self.parallel_post_lambdas = nn.Parameter(torch.ones(n, 2, 2)) if two_lanes else None
        self.parallel_resid_lambdas = nn.Parameter(torch.full((n, 2), 1.1)) if two_lanes else None
        self.ve_layers = h.ve_layer_indices
        self.ve_shared = ScaledEmbedding(h.vocab_size, h.ve_dim, kv_dim, 0.1, 0.01) if self.ve_layers else None
        self.ve_layer_scales = nn.ParameterList(nn.Parameter(torch.ones(1)) for _ in self.ve_layers)
        self.lm_head = None if h.tie_embeddings else CastedLinear(dim, h.vocab_size)
        self.ce_op: Optional[Callable] = None  # the fused softcapped CE op when CE_KERNEL selects Triton
        self.lora_block: Callable = block_call  # run_block's with TTT adapters (make_lora_nll may compile it)
        self._init_weights(h)
    @torch.no_grad()
    def _init_weights(self, h: Hyperparameters) -> None:
        """SPEC §4's draw order (so a seed gives the record's weights): constructors, tok_emb, banks, projections."""
        n = self.num_layers
        if h.init_linear_draws:  # the 04-09 record's per-matrix nn.Linear modules drew their default init first
            for i in range(n):
                for weight in self.layer_weights(i):
                    nn.init.kaiming_uniform_(weight, a=math.sqrt(5))
        nn.init.normal_(self.tok_emb.weight, std=h.tied_embed_init_std)
        if self.bigram is not None:
            nn.init.zeros_(self.bigram.embed.weight)
        attention = [[self.qo_bank[i], self.kv_bank[i], self.kv_bank[n + i]] for i in range(n)]
        mlp = [[self.mlp_up_bank[i]] for i in range(n)]  # W_o, W_down start at zero (a 1/sqrt(2n) scale is moot)
        by_layer = attention + mlp if h.init_mlp_after_attention else [a + m for a, m in zip(attention, mlp)]
        for weight in (weight for layer in by_layer for weight in layer):
            nn.init.orthogonal_(weight)
        nn.init.zeros_(self.qo_bank[n:]), nn.init.zeros_(self.mlp_down_bank)
        if self.smear_gate is not None:
            nn.init.zeros_(self.smear_gate.weight)  # drawn by its constructor, as the record's nn.Linear
        # any size (the record: both dims >= 64, else zero, and a zero bigram.proj never gets a gradient)
        for module in self.modules():
            if isinstance(module, CastedLinear):
                (nn.init.zeros_ if module is self.lm_head else nn.init.orthogonal_)(module.weight)
    def forward(self, ids: Tensor, targets: Tensor, cu_seqlens: Optional[Tensor] = None) -> Tensor:
        """Mean cross-entropy of the next-token logits; with gradients, CE_KERNEL's fused op (evals keep this form).
        With cu_seqlens, ids (1, T) is a packed row whose tokens attend within their segment only (SPEC_0427 §5)."""
        if self.ce_op is not None and torch.is_grad_enabled():
            logits = self.logits_from_hidden(self.forward_hidden(ids, None, cu_seqlens), capped=False)
            return self.ce_op(logits.reshape(-1, logits.size(-1)), targets.reshape(-1), self.logit_softcap).mean()
        logits = self.logits_from_hidden(self.forward_hidden(ids, None, cu_seqlens))
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))
    def forward_hidden(self, ids: Tensor, collector: Optional["HessianCollector"] = None,
                       cu_seqlens: Optional[Tensor] = None, lora: Optional["BatchedLoRA"] = None,
                       rope: Optional[Tuple[Tensor, ...]] = None) -> Tensor:
        """ids (B, T) -> hidden states (B, T, d) before the output norm; a collector gets every block matrix's input.
        The blocks get rope = (the RoPE tables (default: rope_tables(T)), cu_seqlens): where each token sits, in the
        row and in its segment; lora(slot, kind, x): the TTT adapters of block call `slot` (SPEC_0427 §10.4)."""
        x = self.tok_emb(ids)
        if self.bigram is not None:
            x = x + self.bigram(bigram_buckets(ids, self.bigram.embed.num_embeddings))
        if self.smear_gate is not None:
            x = self.smear_gate(x, ids, self.smear_lambda)
        x = x0 = rms_norm(x) if self.smear is None else self.smear(rms_norm(x))
        rope = (rope or self.rope_tables(ids.size(1), ids.device, x.dtype)) + (cu_seqlens,)
        value_embed = self.ve_shared(ids).to(x.dtype) if self.ve_shared is not None else None
        encoder, decoder = self.layer_orders[self.looping]
        slot_lora = [None] * len(encoder + decoder) if lora is None else lora.slots()
        skips = []
        for slot, i in enumerate(encoder):
            x = self.run_block(i, x, x0, rope, value_embed, collector, lora=slot_lora[slot])
            skips.append(x)
        lane1 = None  # two-lane blocks (SPEC_0427 §4, §12): x is lane 0, which alone takes the skips
        for j, i in enumerate(decoder):
            if self.blocks[i].two_lanes and lane1 is None:
                lane1 = x  # both lanes start from x as it is before this position's skip, which lane 0 alone takes
            if j < self.skip_weights.size(0) and skips:
                skip = self.skip_weights[j].to(x.dtype) * skips.pop()
                gated = self.skip_gates is not None  # x <- sigmoid(g) x + (1 - sigmoid(g)) w s: the records' lerp
                x = torch.lerp(skip, x, torch.sigmoid(self.skip_gates[j].to(x.dtype))) if gated else x + skip
            lora_j = slot_lora[len(encoder) + j]
            if self.blocks[i].two_lanes:
                x, lane1 = self.run_block(i, x, x0, rope, value_embed, collector, lane1, lora_j)
            else:
                x = self.run_block(i, x, x0, rope, value_embed, collector, lora=lora_j)
        return x if lane1 is None else (x + lane1) / 2  # the mean of the lanes (PARALLEL_FINAL_LANE=mean)
    def rope_tables(self, seq_len: int, device: torch.device, dtype: torch.dtype) -> Tuple[Tensor, ...]:
        """The model's one RoPE table of this length, made once by eager code and read by every path (training,
        evals, GPTQ calibration, TTT scoring and training): a table built inside a compiled graph would get the
        backend's roundings instead (CUDA inductor drops the bf16 rounding of the positions)."""
        key = (seq_len, dtype, device)
        if key not in self.rope_cache:
            if torch.compiler.is_compiling():
                raise RuntimeError("no RoPE table of length %d was made before compiling (GPT.rope_lengths %s)"
                                   % (seq_len, self.rope_lengths))
            self.rope_cache[key] = rotary_tables(seq_len, self.head_dim, self.rope_dims, self.rope_base, device,
                                                 dtype, *self.rope_args)
        return self.rope_cache[key]
    def run_block(self, i: int, x: Tensor, x0: Tensor, rope: tuple, value_embed: Optional[Tensor],
                  collector: Optional["HessianCollector"], lane1: Optional[Tensor] = None, lora=None):
        """Block i on x, or with lane1 its two-lane form on (x, lane1) -> (lane 0, lane 1)."""
        ve = value_embed * self.ve_layer_scales[self.ve_layers.index(i)].to(x.dtype) if i in self.ve_layers else None
        lambdas = None if lane1 is None else (self.parallel_resid_lambdas[i].to(x.dtype),
                                              self.parallel_post_lambdas[i].to(x.dtype))
        call = block_call if lora is None else self.lora_block  # the TTT's: make_lora_nll compiles them, one per kind
        return call(self.blocks[i], x, x0, self.layer_weights(i), rope, ve, collector, lora, lane1, lambdas)
    def logits_from_hidden(self, hidden: Tensor, capped: bool = True, lora: Optional["BatchedLoRA"] = None) -> Tensor:
        """(..., d) -> fp32 soft-capped logits (..., V); capped=False: the logits before the softcap, as computed."""
        x = rms_norm(hidden)
        logits = F.linear(x, self.tok_emb.weight.to(x.dtype)) if self.lm_head is None else self.lm_head(x)
        if lora is not None:  # the documents' head adapters (SPEC_0427 §10.4), before the softcap
            logits = logits + lora(0, "head", x)
        return self.logit_softcap * torch.tanh(logits.float() / self.logit_softcap) if capped else logits
    def layer_weights(self, i: int) -> Tuple[Tensor, ...]:
        """Layer i's (W_q, W_k, W_v, W_o, W_up, W_down): views of the bank rows."""
        n = self.num_layers
        return (self.qo_bank[i], self.kv_bank[i], self.kv_bank[n + i], self.qo_bank[n + i],
                self.mlp_up_bank[i], self.mlp_down_bank[i])
    def set_qat(self, enabled: bool) -> None:
        for module in self.modules():
            if isinstance(module, CastedLinear):
                module.qat_active.fill_(float(enabled))
    def qat_enabled(self) -> bool:
        return any(bool(m.qat_active) for m in self.modules() if isinstance(m, CastedLinear))

def build_model(h: Hyperparameters, device: torch.device) -> GPT:
    """Seeded fp32 build on CPU, then on CUDA the dtype recipe; then the RoPE tables of GPT.rope_lengths."""
    random.seed(h.seed)
    np.random.seed(h.seed)
    torch.manual_seed(h.seed)
    model = GPT(h)
    model = apply_dtype_recipe(model.to(device), h) if device.type == "cuda" else model
    for seq_len in model.rope_lengths:
        model.rope_tables(seq_len, device, model.tok_emb.weight.dtype)
    return model

def apply_dtype_recipe(model: GPT, h: Hyperparameters) -> GPT:
    """SPEC §4: bf16, but fp32 banks, CastedLinear weights, 0-D/1-D params and CONTROL_TENSOR_NAME_PATTERNS names
    (small Adam updates to resid_mix would round away in bf16)."""
    patterns = [part.strip() for part in h.control_tensor_name_patterns.split(",") if part.strip()]
    casted = {id(m.weight) for m in model.modules() if isinstance(m, CastedLinear)}
    scales = {name: buffer.clone() for name, buffer in model.named_buffers() if name.endswith("norm_factor")}
    model.bfloat16()
    for name, value in scales.items():  # the ln scales stay fp32: a bf16 one would round 1/sqrt(layer + 1)
        model.get_buffer(name).data = value
    for name, param in model.named_parameters():
        if name.endswith("_bank") or id(param) in casted or param.ndim < 2 or any(p in name for p in patterns):
            param.data = param.data.float()
    return model

def block_call(block: "Block", x: Tensor, x0: Tensor, weights: Tuple[Tensor, ...], rope, value_embed, collector,
               lora: Optional["SlotLoRA"], lane1: Optional[Tensor], lambdas):
    """A block on x, or with lane1 its two-lane form; the unit make_lora_nll compiles for the TTT: all that differs
    between calls of one kind is an input (the block's parameters, its ln scale, weights, adapters): one graph."""
    if lane1 is None:
        return block(x, x0, weights, rope, value_embed, collector, lora)
    return block.forward_lanes(x, lane1, x0, lambdas, weights, rope, value_embed, collector, lora)

class Block(nn.Module):
    def __init__(self, h: Hyperparameters, layer_index: int):
        super().__init__()
        dim = h.model_dim
        self.name = "blocks.%d." % layer_index
        self.attn = CausalSelfAttention(h, layer_index >= h.num_layers - h.xsa_last_n, self.name + "attn.")
        self.attn_scale = nn.Parameter(torch.ones(dim))
        self.mlp_scale = nn.Parameter(torch.ones(dim))
        self.resid_mix = nn.Parameter(torch.stack((torch.ones(dim), torch.zeros(dim))))
        # the ln scale: a 0-D fp32 tensor, an input of a compiled block (a float would be a constant: a graph per layer)
        self.register_buffer("norm_factor", torch.tensor(1 / math.sqrt(layer_index + 1) if h.ln_scale else 1.0),
                             persistent=False)
        self.parallel = 0 <= h.parallel_residual_start <= layer_index  # SPEC_0409 §4: one input to both branches
        self.two_lanes = 0 <= h.parallel_start_layer <= layer_index  # SPEC_0427 §4: GPT calls forward_lanes instead
        self.mlp_op: Optional[Callable] = None  # the fused MLP op when MLP_KERNEL selects Triton
    def forward(self, x: Tensor, x0: Tensor, weights: Tuple[Tensor, ...], rope, value_embed,
                collector: Optional["HessianCollector"] = None, lora: Optional[Callable] = None) -> Tensor:
        """x + attn_scale * attn(x), then + mlp_scale * mlp(new x; parallel: attn's input)."""
        mix = self.resid_mix.to(x.dtype)
        x = mix[0] * x + mix[1] * x0
        attn_in = self.scaled_norm(x)
        x = x + self.attention_branch(attn_in, weights, rope, value_embed, collector, lora)
        mlp_in = attn_in if self.parallel else self.scaled_norm(x)
        return x + self.mlp_branch(mlp_in, weights, collector, lora)
    def scaled_norm(self, x: Tensor) -> Tensor:  # the product in fp32, as with a float scale: never a bf16 scale
        return (rms_norm(x).to(self.norm_factor.dtype) * self.norm_factor).to(x.dtype)
    def forward_lanes(self, lane0: Tensor, lane1: Tensor, x0: Tensor, lambdas: Tuple[Tensor, Tensor],
                      weights: Tuple[Tensor, ...], rope, value_embed, collector=None,
                      lora=None) -> Tuple[Tensor, Tensor]:
        """SPEC_0427 §4's two-lane block: a = attn_scale * attn(lane 0 mixed with x0), b = mlp_scale * mlp(lane 1);
        lane k <- resid[k] * lane k + post[0, k] * a + post[1, k] * b, with lambdas = (resid (2,), post (2, 2))."""
        (resid, post), mix = lambdas, self.resid_mix.to(lane0.dtype)
        attn_in = self.scaled_norm(mix[0] * lane0 + mix[1] * x0)
        a = self.attention_branch(attn_in, weights, rope, value_embed, collector, lora)
        b = self.mlp_branch(self.scaled_norm(lane1), weights, collector, lora)
        return resid[0] * lane0 + post[0, 0] * a + post[1, 0] * b, resid[1] * lane1 + post[0, 1] * a + post[1, 1] * b
    def attention_branch(self, attn_in: Tensor, weights: Tuple[Tensor, ...], rope, value_embed,
                         collector: Optional["HessianCollector"], lora: Optional[Callable] = None) -> Tensor:
        """attn_scale * attn(attn_in), the scale folded into W_o's rows (so the backward saves no branch output);
        lora(kind, x): the TTT adapters, o's (on attn_in) added before the scale."""
        w_q, w_k, w_v, w_o = weights[:4]
        out = self.attn(attn_in, w_q, w_k, w_v, self.attn_scale[:, None] * w_o, rope, value_embed, collector, lora)
        return out if lora is None else out + self.attn_scale.to(out.dtype) * lora("o", attn_in)
    def mlp_branch(self, mlp_in: Tensor, weights: Tuple[Tensor, ...], collector: Optional["HessianCollector"],
                   lora: Optional[Callable] = None) -> Tensor:
        """mlp_scale * mlp(mlp_in), the scale folded into W_down's rows; a collector gets fc's and proj's inputs;
        the TTT adapter's lora("mlp", mlp_in) is added before the scale."""
        w_up, w_down = weights[4].to(mlp_in.dtype), (self.mlp_scale[:, None] * weights[5]).to(mlp_in.dtype)
        if collector is None:
            out = (self.mlp_op or leaky_relu_sq_mlp)(mlp_in, w_up, w_down)
            return out if lora is None else out + self.mlp_scale.to(out.dtype) * lora("mlp", mlp_in)
        act = F.leaky_relu(F.linear(mlp_in, w_up), negative_slope=LEAKY_SLOPE).square()  # leaky_relu_sq_mlp's hidden
        collector.add(mlp_in, self.name + "mlp.fc.weight")
        collector.add(act, self.name + "mlp.proj.weight")
        return F.linear(act, w_down)

class CausalSelfAttention(nn.Module):
    """GQA attention on banked weights; partial RoPE, q/k RMS-norm, q gain, optional XSA and value embedding."""
    def __init__(self, h: Hyperparameters, use_xsa: bool, name: str):
        super().__init__()
        self.name = name  # prefix of its matrices' names in the unbanked state dict
        self.num_heads, self.num_kv_heads = h.num_heads, h.num_kv_heads
        self.head_dim = h.model_dim // h.num_heads
        self.q_gain = nn.Parameter(torch.full((h.num_heads,), h.qk_gain_init))
        self.use_xsa, self.rope_dims = use_xsa, h.rope_dims
        # SPEC_0427 §4: the sparse per-head output gate (zero init: every head starts at half its output)
        self.attn_gate_w = nn.Parameter(torch.zeros(h.num_heads, h.gate_window)) if h.sparse_attn_gate_enabled else None
        self.attn_gate_scale = h.sparse_attn_gate_scale
        self.backend, self.doc_backend, self.max_piece = "sdpa", "sdpa", h.train_seq_len  # attention with cu_seqlens
        self.qkv_op: Optional[Callable] = None  # the fused q/k/v op when QK_KERNEL selects Triton
        self.xsa_op: Optional[Callable] = None  # the fused XSA op, likewise
    def forward(self, x: Tensor, w_q: Tensor, w_k: Tensor, w_v: Tensor, w_o: Tensor, rope: Tuple[Tensor, ...],
                value_embed: Optional[Tensor], collector: Optional["HessianCollector"] = None,
                lora: Optional[Callable] = None) -> Tensor:
        """A collector gets the inputs of c_q/c_k/c_v and proj, from the PyTorch forms; lora(kind, x) adds the TTT
        adapters to q, k and v (SPEC_0427 §10.4). The fused q/k/v and XSA ops are per token, so they take a packed
        row (rope's cu_seqlens not None) as any other."""
        batch, seq_len, _ = x.shape
        *rope, cu_seqlens = rope
        backend = self.backend if cu_seqlens is None else self.doc_backend
        if collector is not None:
            collector.add(x, *(self.name + part for part in ("c_q.weight", "c_k.weight", "c_v.weight")))
        if self.qkv_op is not None and collector is None:
            repeat = 1 if backend in GQA_BACKENDS else self.num_heads // self.num_kv_heads
            plain_v = self.use_xsa and repeat > 1  # XSA reads v unrepeated; the op's backward adds its gradient
            qkv = F.linear(x, torch.cat((w_q, w_k, w_v)).to(x.dtype))
            if lora is not None:
                qkv = qkv + torch.cat([lora(kind, x) for kind in ("q", "k", "v")], dim=-1)
            q, k, v, v_plain = self.qkv_op(qkv, value_embed, rope[0], rope[1], self.q_gain.to(x.dtype),
                                           self.num_heads, self.rope_dims, repeat, plain_v)
            y = causal_attention(q, k, v, backend, cu_seqlens, self.max_piece)
            v = v_plain if plain_v else v
        else:
            q, k, v = (F.linear(x, w.to(x.dtype)) for w in (w_q, w_k, w_v))
            if lora is not None:
                q, k, v = q + lora("q", x), k + lora("k", x), v + lora("v", x)
            q = q.view(batch, seq_len, self.num_heads, self.head_dim)
            k = k.view(batch, seq_len, self.num_kv_heads, self.head_dim)
            if value_embed is not None:
                v = v + value_embed
            v = v.view(batch, seq_len, self.num_kv_heads, self.head_dim)
            q = qk_norm_rope(q, *rope, self.q_gain.to(q.dtype))
            y = causal_attention(q, qk_norm_rope(k, *rope, None), v, backend, cu_seqlens, self.max_piece)
        if self.use_xsa:  # v has the KV heads here (group H / Hkv)
            xsa = self.xsa_op if self.xsa_op is not None and collector is None else exclusive_self_attention
            y = xsa(y, v)
        if self.attn_gate_w is not None:  # head h times sigmoid(scale W_h x[:window]), x this module's input
            logits = F.linear(x[..., :self.attn_gate_w.size(1)], self.attn_gate_w.to(x.dtype))
            y = y * torch.sigmoid(self.attn_gate_scale * logits)[..., None]
        y = y.reshape(batch, seq_len, -1)
        if collector is not None:
            collector.add(y, self.name + "proj.weight")
        return F.linear(y, w_o.to(x.dtype))

class ScaledEmbedding(nn.Module):
    """scale * proj(embed(ids)): the hashed bigram embedding (SPEC §4.2) and the shared value embedding."""
    def __init__(self, num_embeddings: int, embed_dim: int, out_dim: int, scale: float, init_std: float = 0.0):
        super().__init__()
        self.embed = nn.Embedding(num_embeddings, embed_dim)
        if init_std:
            nn.init.normal_(self.embed.weight, std=init_std)  # before proj's draws, as the record's value embedding
        self.proj = CastedLinear(embed_dim, out_dim)
        self.scale = nn.Parameter(torch.tensor(scale))
    def forward(self, ids: Tensor) -> Tensor:
        return self.scale * self.proj(self.embed(ids))

def bigram_buckets(ids: Tensor, buckets: int) -> Tensor:
    """Hash of each (previous, current) token pair into [0, buckets - 1); position 0 gets the reserved last bucket."""
    ids32, modulus = ids.to(torch.int32), buckets - 1
    pairs = torch.bitwise_xor(36313 * ids32[:, 1:], 27191 * ids32[:, :-1]) % modulus
    return torch.cat((torch.full_like(ids32[:, :1], modulus), pairs), dim=1)

class SmearGate(nn.Module):
    """out_t = (1 - g) * x_t + g * x_{t-1} with g = sigmoid(gate) per channel and x_{-1} = 0."""
    def __init__(self, dim: int):
        super().__init__()
        self.gate = nn.Parameter(torch.zeros(dim))
    def forward(self, x: Tensor) -> Tensor:
        g = torch.sigmoid(self.gate.to(x.dtype))
        return (1 - g) * x + g * F.pad(x[:, :-1], (0, 0, 1, 0))

class TokenSmearGate(nn.Module):
    """04-27's SmearGate (SPEC_0427 §4), on the embedding: x_t += lam sigmoid(w x_t[:window]) x_{t-1} for t >= 1,
    x_0 kept; with bos_mask not where ids_t is BOS, so a document's first token never takes the previous document's
    last (PR #1851's fix; PR #1797 had none). w (1, window) and the scalar lam start at zero: the identity."""
    def __init__(self, window: int, bos_mask: bool):
        super().__init__()  # the record's nn.Linear(window, 1) draws its default init (SPEC_0427 §12), zeroed later
        self.weight = nn.Parameter(nn.init.kaiming_uniform_(torch.empty(1, window), a=math.sqrt(5)))
        self.bos_mask = bos_mask
    def forward(self, x: Tensor, ids: Tensor, lam: Tensor) -> Tensor:
        gate = lam.to(x.dtype) * torch.sigmoid(F.linear(x[:, 1:, :self.weight.size(1)], self.weight.to(x.dtype)))
        if self.bos_mask:
            gate = gate * (ids[:, 1:, None] != BOS_ID).to(x.dtype)
        return torch.cat((x[:, :1], x[:, 1:] + gate * x[:, :-1]), dim=1)

class CastedLinear(nn.Linear):
    """fp32 weight cast to the activation dtype; in training the 0/1 tensor `qat_active` (a tensor: no recompile
    when late QAT starts) blends in the fake-quantized weight with a straight-through gradient."""
    def __init__(self, in_features: int, out_features: int):
        super().__init__(in_features, out_features, bias=False)
        self.register_buffer("qat_active", torch.zeros(()), persistent=False)
    def forward(self, x: Tensor) -> Tensor:
        weight = self.weight
        if self.training:
            weight = weight + self.qat_active.to(weight.dtype) * (fake_quantize_int6_rows(weight) - weight).detach()
        return F.linear(x, weight.to(x.dtype))

def fake_quantize_int6_rows(weight: Tensor) -> Tensor:
    """Late-QAT weight (SPEC §6): per-row sigma = max(rowmax|W|/31, 1/31) in fp32, on the record's [-32, 31] grid."""
    w32 = weight.float()
    sigma = (w32.abs().amax(dim=1, keepdim=True) / 31.0).clamp_min(1.0 / 31.0)
    return (torch.clamp(torch.round(w32 / sigma), -32, 31) * sigma).to(weight.dtype)

def rms_norm(x: Tensor) -> Tensor:
    return F.rms_norm(x, (x.size(-1),))

def rotary_tables(seq_len: int, head_dim: int, rope_dims: int, base: float, device, dtype, train_seq_len: int = 1024,
                  bf16: bool = False) -> Tuple[Tensor, ...]:
    """cos_full, sin_full (T, head_dim) in `dtype` and the pair-swap index. Past train_seq_len the base is
    NTK-rescaled (SPEC §4). Angles are fp32 products of fp32 positions and theta; with `bf16`, theta rounded to bf16
    first: the 04-09 record's table (SPEC_0409 §0.7: a bf16 theta buffer; its first compiled forward builds the
    table, and on CUDA that keeps the positions fp32, measured: bench/NOTES.md "RoPE tables")."""
    if seq_len > train_seq_len:
        base, bf16 = base * (seq_len / train_seq_len) ** (rope_dims / (rope_dims - 2)), False
    half = rope_dims // 2
    inv_freq = base ** (-torch.arange(0, rope_dims, 2, device=device, dtype=torch.float32) / rope_dims)
    positions = torch.arange(seq_len, device=device, dtype=torch.float32)
    angles = torch.outer(positions, inv_freq.bfloat16().float() if bf16 else inv_freq)
    cos, sin = angles.cos().to(dtype), angles.sin().to(dtype)
    ones = torch.ones(seq_len, head_dim - rope_dims, device=device, dtype=dtype)
    dims = torch.arange(head_dim, device=device)
    swap = torch.where(dims < half, dims + half, torch.where(dims < rope_dims, dims - half, dims))
    return torch.cat((cos, cos, ones), dim=1), torch.cat((sin, -sin, torch.zeros_like(ones)), dim=1), swap

class _SwapPairsTimes(torch.autograd.Function):
    """x[..., swap] * table for a self-inverse swap: the backward is a gather too, not autograd's scatter-add."""
    @staticmethod
    def forward(ctx, x: Tensor, table: Tensor, swap: Tensor) -> Tensor:
        ctx.save_for_backward(table, swap)
        return x[..., swap] * table
    @staticmethod
    def backward(ctx, grad: Tensor):
        table, swap = ctx.saved_tensors
        return (grad * table)[..., swap], None, None

def apply_partial_rotary(x: Tensor, cos_full: Tensor, sin_full: Tensor, swap: Tensor) -> Tensor:
    """RoPE on dims [0, R) of x (B, T, H, D) as one pointwise expression (no slice or cat): it fuses with the norm."""
    cos_full, sin_full = cos_full[None, :, None, :], sin_full[None, :, None, :]
    return x * cos_full + _SwapPairsTimes.apply(x, sin_full, swap)

def qk_norm_rope(x: Tensor, cos_full: Tensor, sin_full: Tensor, swap: Tensor, gain: Optional[Tensor]) -> Tensor:
    """RoPE(rms_norm(x)), times the per-head gain if given."""
    y = apply_partial_rotary(rms_norm(x), cos_full, sin_full, swap)
    return y if gain is None else y * gain[None, None, :, None]

def qkv_heads(qkv: Tensor, value_embed: Optional[Tensor], cos_full: Tensor, sin_full: Tensor, swap: Tensor,
              gain: Tensor, num_heads: int, rope_dims: int, repeat: int,
              plain_v: bool) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """The fused q/k/v op's PyTorch form on qkv (B, T, (H + 2 Hkv) D): RoPE(rms_norm(q)) * gain, RoPE(rms_norm(k)),
    v + value_embed, K and V repeated `repeat` times, and with plain_v v unrepeated for XSA (else empty)."""
    batch, seq_len, width = qkv.shape
    head_dim = cos_full.size(1)
    kv_heads = (width // head_dim - num_heads) // 2
    q, k, v = qkv.split((num_heads * head_dim, kv_heads * head_dim, kv_heads * head_dim), dim=-1)
    if value_embed is not None:
        v = v + value_embed
    q = qk_norm_rope(q.view(batch, seq_len, num_heads, head_dim), cos_full, sin_full, swap, gain)
    k = qk_norm_rope(k.view(batch, seq_len, kv_heads, head_dim), cos_full, sin_full, swap, None)
    v = v.reshape(batch, seq_len, kv_heads, head_dim)
    return q, k.repeat_interleave(repeat, dim=2), v.repeat_interleave(repeat, dim=2), v if plain_v else v.new_empty(0)

GQA_BACKENDS = ("fa3", "fa3_varlen", "fa4_varlen", "flex")  # they read KV head h // (H / Hkv): K, V not repeated

def causal_attention(q: Tensor, k: Tensor, v: Tensor, backend: str, cu_seqlens: Optional[Tensor] = None,
                     max_piece: int = 0) -> Tensor:
    """q (B, T, H, D), k/v (B, T, Hkv, D) -> (B, T, H, D); query head h reads KV head h // (H / Hkv). With cu_seqlens
    (B = 1, a packed row), only within each segment [cu[i], cu[i + 1]) of <= max_piece tokens (SPEC_0427 §5)."""
    if cu_seqlens is not None:
        return document_attention(q, k, v, cu_seqlens, max_piece, backend)
    if backend == "fa3":
        out = _flash_attn_func(q, k, v, causal=True)
        return out[0] if isinstance(out, tuple) else out
    group = q.size(2) // k.size(2)
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    if group > 1:
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2)

def document_attention(q: Tensor, k: Tensor, v: Tensor, cu_seqlens: Tensor, max_piece: int, backend: str) -> Tensor:
    """causal_attention() of a packed row by DOC_ATTN_BACKEND: a varlen kernel (FA3's, PyTorch's), FlexAttention with
    a document mask, or SDPA with a dense (T, T) block-diagonal mask (short rows only: the reference-like path)."""
    group = q.size(2) // k.size(2)
    if group > 1 and backend not in GQA_BACKENDS:
        k, v = k.repeat_interleave(group, dim=2), v.repeat_interleave(group, dim=2)
    if backend == "fa4_varlen":
        return fa4_varlen_op()(q[0], k[0], v[0], cu_seqlens, max_piece)[0][None]
    if backend in ("fa3_varlen", "torch_varlen"):
        varlen = _flash_attn_varlen_func if backend == "fa3_varlen" else _torch_varlen_attn
        out = varlen(q[0], k[0], v[0], cu_seqlens, cu_seqlens, max_piece, max_piece,
                     **(dict(causal=True) if backend == "fa3_varlen" else TORCH_VARLEN_CAUSAL))
        return (out[0] if isinstance(out, tuple) else out)[None]
    positions = torch.arange(q.size(1), device=q.device, dtype=cu_seqlens.dtype)
    segment = torch.searchsorted(cu_seqlens, positions, right=True)  # a segment's tokens share an id
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    if backend == "flex":
        mask = _flex.create_block_mask(lambda b, h, i, j: (i >= j) & (segment[i] == segment[j]), None, None,
                                       q.size(2), q.size(2), device=q.device)
        return _flex.flex_attention(q, k, v, block_mask=mask, enable_gqa=group > 1).transpose(1, 2)
    mask = (segment[:, None] == segment[None, :]) & (positions[:, None] >= positions[None, :])
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask).transpose(1, 2)

def fa4_varlen_op() -> Callable:
    """FA4's causal varlen kernels as one torch op (q, k, v, cu_seqlens, max_piece) -> (out, lse), differentiable in q,
    k, v, made at first use: compiled graphs call it whole (Dynamo cannot trace FA4's host-side CuTe compiles)."""
    if not hasattr(torch.ops.train_gpt, "fa4_varlen"):
        spans = lambda cu, top: dict(cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=top, max_seqlen_k=top, causal=True)
        @torch.library.custom_op("train_gpt::fa4_varlen", mutates_args=())
        def forward(q: Tensor, k: Tensor, v: Tensor, cu: Tensor, top: int) -> Tuple[Tensor, Tensor]:
            return tuple(_fa4._flash_attn_fwd(q, k, v, return_lse=True, **spans(cu, top))[:2])
        @torch.library.custom_op("train_gpt::fa4_varlen_backward", mutates_args=())
        def backward(q: Tensor, k: Tensor, v: Tensor, out: Tensor, grad: Tensor, lse: Tensor, cu: Tensor,
                     top: int) -> Tuple[Tensor, Tensor, Tensor]:
            return tuple(_fa4._flash_attn_bwd(q, k, v, out, grad, lse, **spans(cu, top))[:3])
        forward.register_fake(lambda q, *_: (torch.empty_like(q), q.new_empty(q.shape[1::-1], dtype=torch.float32)))
        backward.register_fake(lambda q, k, v, *_: (torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)))
        def keep(ctx, inputs, output):
            ctx.save_for_backward(*inputs[:3], *output, inputs[3])
            ctx.top = inputs[4]
        def grads(ctx, grad, _):
            q, k, v, out, lse, cu = ctx.saved_tensors
            return (*backward(q, k, v, out, grad.contiguous(), lse, cu, ctx.top), None, None)
        forward.register_autograd(grads, setup_context=keep)
    return torch.ops.train_gpt.fa4_varlen

def per_document_attention(q: Tensor, k: Tensor, v: Tensor, cu_seqlens: Tensor) -> Tensor:
    """The plain reference of document_attention(): causal SDPA on each non-empty segment alone."""
    bounds = cu_seqlens.tolist()
    return torch.cat([causal_attention(q[:, a:b], k[:, a:b], v[:, a:b], "sdpa")
                      for a, b in zip(bounds, bounds[1:]) if b > a], dim=1)

def exclusive_self_attention(y: Tensor, v: Tensor) -> Tensor:
    """XSA: y (B, T, H, D) minus its component along the unit value v (B, T, Hv, D) of head h // (H / Hv)."""
    batch, seq_len, heads, head_dim = y.shape
    group = heads // v.size(2)
    y = y.view(batch, seq_len, v.size(2), group, head_dim)
    v_unit = F.normalize(v, dim=-1).unsqueeze(-2)
    return (y - (y * v_unit).sum(dim=-1, keepdim=True) * v_unit).view(batch, seq_len, heads, head_dim)

def leaky_relu_sq_mlp(x: Tensor, w_up: Tensor, w_down: Tensor) -> Tensor:
    """leaky_relu(x W_up^T, 0.5)^2 W_down^T."""
    return F.linear(F.leaky_relu(F.linear(x, w_up), negative_slope=LEAKY_SLOPE).square(), w_down)

# ==== 5. FUSED OPS (Triton) AND THE KERNEL CHOICE ====
# On CUDA four torch.library.triton_ops (the compiled graph keeps their kernels) replace section 4's PyTorch forms
# with the same arithmetic as the compiled PyTorch form; bench/NOTES.md has the measurements.
# - qkv_heads (QK_KERNEL) = qkv_heads() after one q/k/v GEMM: per head row, fp32 RoPE(rms_norm(x)) * gain (the norm
#   rounded to x.dtype before RoPE) or x + value_embed, stored `repeat` times; the backward writes dq, dk, dv into one
#   (B, T, (H + 2 Hkv) D) gradient, so the projection's backward is one GEMM for dx and one for dW.
# - xsa (QK_KERNEL) = exclusive_self_attention(): per row of v, the `group` output rows that use it, read through
#   their strides (no copy of SDPA's output).
# - mlp (MLP_KERNEL) = leaky_relu_sq_mlp() with the activation in GEMM epilogues (fp32, on h and d_act rounded as a
#   GEMM writes them): the up GEMM also writes leaky(h)^2, the d_act = dy W_down GEMM writes dh; the rest is cuBLAS.
# - softcapped_ce (CE_KERNEL) = GPT.forward's training loss from the logits before the softcap (SPEC_0427 §6.5): one
#   program per row in fp32, keeping only each row's log-sum-exp for the backward (no fp32 (rows, V) tensors).
# Epsilons, the slope and the softcap are constexpr: inductor passes a Python float to a kernel as fp64, pulling the
# math into fp64.
if triton is not None:
    @triton.jit
    def _qk_rows(rows, heads, seq_len, HEAD_DIM: tl.constexpr, HALF: tl.constexpr, ROPE: tl.constexpr,
                 BLOCK_R: tl.constexpr):
        """This program's rows r of (B, T, H) (head fastest), columns, RoPE's swap, row masks, head, t, b."""
        r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
        d = tl.arange(0, HEAD_DIM)
        swap = tl.where(d < HALF, d + HALF, tl.where(d < ROPE, d - HALF, d))
        ok = r < rows
        return r, d, swap, ok, ok[:, None], r % heads, (r // heads) % seq_len, r // (heads * seq_len)

    @triton.jit
    def _qkv_heads_fwd(x_ptr, cos_ptr, sin_ptr, gain_ptr, add_ptr, out_ptr, plain_ptr, rows, heads, seq_len,
                       column, sxb, sxt, sxh, repeat, EPS: tl.constexpr, HEAD_DIM: tl.constexpr, HALF: tl.constexpr,
                       ROPE: tl.constexpr, NORM_ROPE: tl.constexpr, HAS_GAIN: tl.constexpr, HAS_ADD: tl.constexpr,
                       HAS_PLAIN: tl.constexpr, BLOCK_R: tl.constexpr):
        r, d, swap, ok, ok2, h, t, b = _qk_rows(rows, heads, seq_len, HEAD_DIM, HALF, ROPE, BLOCK_R)
        x_row = x_ptr + (b.to(tl.int64) * sxb + t * sxt + h * sxh + column)[:, None]
        x = tl.load(x_row + d[None, :], mask=ok2, other=0.0).to(tl.float32)
        if NORM_ROPE:
            x_swap = tl.load(x_row + swap[None, :], mask=ok2, other=0.0).to(tl.float32)
            inv = tl.rsqrt(tl.sum(x * x, axis=1) / HEAD_DIM + EPS)[:, None]
            norm = (x * inv).to(out_ptr.dtype.element_ty).to(tl.float32)
            norm_swap = (x_swap * inv).to(out_ptr.dtype.element_ty).to(tl.float32)
            table = (t * HEAD_DIM)[:, None] + d[None, :]
            cos = tl.load(cos_ptr + table, mask=ok2, other=0.0).to(tl.float32)
            sin = tl.load(sin_ptr + table, mask=ok2, other=0.0).to(tl.float32)
            y = norm * cos + norm_swap * sin
            if HAS_GAIN:
                y = y * tl.load(gain_ptr + h, mask=ok, other=0.0).to(tl.float32)[:, None]
        else:
            y = x
            if HAS_ADD:
                y += tl.load(add_ptr + (r.to(tl.int64) * HEAD_DIM)[:, None] + d[None, :], mask=ok2,
                             other=0.0).to(tl.float32)
        y = y.to(out_ptr.dtype.element_ty)
        if HAS_PLAIN:
            tl.store(plain_ptr + (r.to(tl.int64) * HEAD_DIM)[:, None] + d[None, :], y, mask=ok2)
        out_row = out_ptr + (r.to(tl.int64) * repeat * HEAD_DIM)[:, None] + d[None, :]
        for j in range(repeat):
            tl.store(out_row + j * HEAD_DIM, y, mask=ok2)

    @triton.jit
    def _qkv_heads_bwd(x_ptr, cos_ptr, sin_ptr, gain_ptr, dy_ptr, dplain_ptr, dx_ptr, dadd_ptr, dgain_ptr, rows,
                       heads, seq_len, column, sxb, sxt, sxh, syb, syt, syh, syd, repeat, EPS: tl.constexpr,
                       HEAD_DIM: tl.constexpr, HALF: tl.constexpr, ROPE: tl.constexpr, NORM_ROPE: tl.constexpr,
                       HAS_GAIN: tl.constexpr, HAS_ADD: tl.constexpr, HAS_PLAIN: tl.constexpr,
                       BLOCK_R: tl.constexpr):
        """x, dx: the projection and its gradient (same strides, this part from `column`); dplain: unrepeated v's."""
        r, d, swap, ok, ok2, h, t, b = _qk_rows(rows, heads, seq_len, HEAD_DIM, HALF, ROPE, BLOCK_R)
        x_offset = (b.to(tl.int64) * sxb + t * sxt + h * sxh + column)[:, None]
        dy = tl.zeros((BLOCK_R, HEAD_DIM), dtype=tl.float32)
        dy_row = dy_ptr + (b.to(tl.int64) * syb + t * syt + h * repeat * syh)[:, None]
        for j in range(repeat):  # the GQA repeat's gradient: the sum over the copies
            dy += tl.load(dy_row + j * syh + d[None, :] * syd, mask=ok2, other=0.0).to(tl.float32)
        if HAS_PLAIN:
            dy += tl.load(dplain_ptr + (r.to(tl.int64) * HEAD_DIM)[:, None] + d[None, :], mask=ok2,
                          other=0.0).to(tl.float32)
        if NORM_ROPE:
            dy_swap = tl.zeros((BLOCK_R, HEAD_DIM), dtype=tl.float32)
            for j in range(repeat):
                dy_swap += tl.load(dy_row + j * syh + swap[None, :] * syd, mask=ok2, other=0.0).to(tl.float32)
            x = tl.load(x_ptr + x_offset + d[None, :], mask=ok2, other=0.0).to(tl.float32)
            table = (t * HEAD_DIM)[:, None]
            cos = tl.load(cos_ptr + table + d[None, :], mask=ok2, other=0.0).to(tl.float32)
            sin = tl.load(sin_ptr + table + d[None, :], mask=ok2, other=0.0).to(tl.float32)
            sin_swap = tl.load(sin_ptr + table + swap[None, :], mask=ok2, other=0.0).to(tl.float32)
            inv = tl.rsqrt(tl.sum(x * x, axis=1) / HEAD_DIM + EPS)[:, None]
            dnorm = dy * cos + dy_swap * sin_swap  # RoPE transposed: the swap is its own inverse
            if HAS_GAIN:
                x_swap = tl.load(x_ptr + x_offset + swap[None, :], mask=ok2, other=0.0).to(tl.float32)
                norm = (x * inv).to(dx_ptr.dtype.element_ty).to(tl.float32)
                norm_swap = (x_swap * inv).to(dx_ptr.dtype.element_ty).to(tl.float32)
                tl.store(dgain_ptr + r, tl.sum(dy * (norm * cos + norm_swap * sin), axis=1), mask=ok)
                dnorm = dnorm * tl.load(gain_ptr + h, mask=ok, other=0.0).to(tl.float32)[:, None]
            unit = x * inv
            dx = inv * (dnorm - unit * (tl.sum(dnorm * unit, axis=1) / HEAD_DIM)[:, None])
        else:
            dx = dy
            if HAS_ADD:
                tl.store(dadd_ptr + (r.to(tl.int64) * HEAD_DIM)[:, None] + d[None, :],
                         dx.to(dadd_ptr.dtype.element_ty), mask=ok2)
        tl.store(dx_ptr + x_offset + d[None, :], dx.to(dx_ptr.dtype.element_ty), mask=ok2)

    @triton.jit
    def _xsa_rows(rows, v_heads, seq_len, HEAD_DIM: tl.constexpr, BLOCK_R: tl.constexpr):
        """(b, t, value head, row, columns, mask) of this program's rows of v (B, T, Hv, D). No pointer goes in:
        inductor counts a pointer that a store address depends on as written, and copies it before every call."""
        r = (tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)).to(tl.int64)
        return r // (v_heads * seq_len), (r // v_heads) % seq_len, r % v_heads, r, tl.arange(0, HEAD_DIM), \
            (r < rows)[:, None]

    @triton.jit
    def _xsa_unit(v, EPS: tl.constexpr):
        """u = v / max(|v|, eps) per row, |v|, max(|v|, eps)."""
        norm = tl.sqrt(tl.sum(v * v, axis=1))[:, None]
        length = tl.maximum(norm, EPS)
        return v / length, norm, length

    @triton.jit
    def _xsa_fwd(y_ptr, v_ptr, out_ptr, rows, v_heads, seq_len, group, syb, syt, syh, syd, EPS: tl.constexpr,
                 HEAD_DIM: tl.constexpr, BLOCK_R: tl.constexpr):
        """y and out: same strides (any); v contiguous."""
        b, t, hv, r, d, ok2 = _xsa_rows(rows, v_heads, seq_len, HEAD_DIM, BLOCK_R)
        v = tl.load(v_ptr + (r * HEAD_DIM)[:, None] + d[None, :], mask=ok2, other=0.0).to(tl.float32)
        unit, _, _ = _xsa_unit(v, EPS)
        for j in range(group):
            offset = (b * syb + t * syt + (hv * group + j) * syh)[:, None] + d[None, :] * syd
            y = tl.load(y_ptr + offset, mask=ok2, other=0.0).to(tl.float32)
            out = y - tl.sum(y * unit, axis=1)[:, None] * unit
            tl.store(out_ptr + offset, out.to(out_ptr.dtype.element_ty), mask=ok2)

    @triton.jit
    def _xsa_bwd(dout_ptr, y_ptr, v_ptr, dy_ptr, dv_ptr, rows, v_heads, seq_len, group, syb, syt, syh, syd, sgb,
                 sgt, sgh, sgd, EPS: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_R: tl.constexpr):
        """out = y - (y.u) u: dy = g - (g.u) u, du = -group sum of ((g.u) y + (y.u) g), then through u = v / max(|v|,
        eps) (no radial term where |v| < eps). y, dy: same strides; g (dout) its own; v, dv contiguous."""
        b, t, hv, r, d, ok2 = _xsa_rows(rows, v_heads, seq_len, HEAD_DIM, BLOCK_R)
        v = tl.load(v_ptr + (r * HEAD_DIM)[:, None] + d[None, :], mask=ok2, other=0.0).to(tl.float32)
        unit, norm, length = _xsa_unit(v, EPS)
        d_unit = tl.zeros((BLOCK_R, HEAD_DIM), dtype=tl.float32)
        for j in range(group):
            h = hv * group + j
            offset = (b * syb + t * syt + h * syh)[:, None] + d[None, :] * syd
            g = tl.load(dout_ptr + (b * sgb + t * sgt + h * sgh)[:, None] + d[None, :] * sgd, mask=ok2,
                        other=0.0).to(tl.float32)
            y = tl.load(y_ptr + offset, mask=ok2, other=0.0).to(tl.float32)
            g_u = tl.sum(g * unit, axis=1)[:, None]
            tl.store(dy_ptr + offset, (g - g_u * unit).to(dy_ptr.dtype.element_ty), mask=ok2)
            d_unit -= g_u * y + tl.sum(y * unit, axis=1)[:, None] * g
        radial = tl.where(norm >= EPS, tl.sum(d_unit * unit, axis=1)[:, None], 0.0)
        dv = (d_unit - radial * unit) / length
        tl.store(dv_ptr + (r * HEAD_DIM)[:, None] + d[None, :], dv.to(dv_ptr.dtype.element_ty), mask=ok2)

    @triton.jit
    def _mlp_tile(tile, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
        """Row and column offsets of output tile `tile`, numbered in groups of GROUP_M row tiles (L2 reuse)."""
        tiles_n = tl.cdiv(N, BLOCK_N)
        group = tile // (GROUP_M * tiles_n)
        first_m = group * GROUP_M
        group_rows = min(tl.cdiv(M, BLOCK_M) - first_m, GROUP_M)
        pid_m = first_m + (tile % (GROUP_M * tiles_n)) % group_rows
        pid_n = (tile % (GROUP_M * tiles_n)) // group_rows
        return pid_m * BLOCK_M + tl.arange(0, BLOCK_M), pid_n * BLOCK_N + tl.arange(0, BLOCK_N)

    @triton.jit
    def _mlp_gemm(a_ptr, b_ptr, M, N, K, stride_am, stride_bk, stride_bn, rm, rn, BLOCK_M: tl.constexpr,
                  BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, PRECISION: tl.constexpr):
        """fp32 tile of A (M, K; unit column stride) @ B (K, N), K % BLOCK_K == 0; edges read clamped indices."""
        rk = tl.arange(0, BLOCK_K)
        a_ptrs = a_ptr + (rm % M).to(tl.int64)[:, None] * stride_am + rk[None, :]
        b_ptrs = b_ptr + rk[:, None] * stride_bk + (rn % N)[None, :] * stride_bn
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for _ in range(0, K, BLOCK_K):
            acc = tl.dot(tl.load(a_ptrs), tl.load(b_ptrs), acc, input_precision=PRECISION)
            a_ptrs += BLOCK_K
            b_ptrs += BLOCK_K * stride_bk
        return acc

    @triton.jit
    def _mlp_up_act_fwd(x_ptr, w_ptr, h_ptr, act_ptr, M, N, K, stride_xm, stride_wn, SLOPE: tl.constexpr,
                        STORE_H: tl.constexpr, PRECISION: tl.constexpr, BLOCK_M: tl.constexpr,
                        BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
        """h = x w^T and act = leaky(h)^2, tile by tile; the programs stride over the tiles."""
        tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
        for tile in tl.range(tl.program_id(0), tiles, tl.num_programs(0), flatten=True):
            rm, rn = _mlp_tile(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
            acc = _mlp_gemm(x_ptr, w_ptr, M, N, K, stride_xm, 1, stride_wn, rm, rn, BLOCK_M, BLOCK_N, BLOCK_K,
                            PRECISION)
            h = acc.to(act_ptr.dtype.element_ty)
            hf = h.to(tl.float32)
            leaky = tl.where(hf > 0, hf, hf * SLOPE)
            out = rm.to(tl.int64)[:, None] * N + rn[None, :]
            ok = (rm < M)[:, None] & (rn < N)[None, :]
            if STORE_H:
                tl.store(h_ptr + out, h, mask=ok)
            tl.store(act_ptr + out, (leaky * leaky).to(act_ptr.dtype.element_ty), mask=ok)

    @triton.jit
    def _mlp_act_grad_bwd(dy_ptr, w_ptr, h_ptr, dh_ptr, M, N, K, stride_dym, stride_wk, SLOPE: tl.constexpr,
                          PRECISION: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                          BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
        """d_act = dy w (rounded to the output dtype, as a GEMM writes it), then dh = d_act * d(leaky(h)^2)/dh."""
        tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
        for tile in tl.range(tl.program_id(0), tiles, tl.num_programs(0), flatten=True):
            rm, rn = _mlp_tile(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
            acc = _mlp_gemm(dy_ptr, w_ptr, M, N, K, stride_dym, stride_wk, 1, rm, rn, BLOCK_M, BLOCK_N, BLOCK_K,
                            PRECISION)
            d_act = acc.to(dh_ptr.dtype.element_ty).to(tl.float32)
            out = rm.to(tl.int64)[:, None] * N + rn[None, :]
            ok = (rm < M)[:, None] & (rn < N)[None, :]
            h = tl.load(h_ptr + out, mask=ok, other=0.0).to(tl.float32)
            slope = tl.where(h > 0, 2.0 * h, (2.0 * SLOPE * SLOPE) * h)
            tl.store(dh_ptr + out, (d_act * slope).to(dh_ptr.dtype.element_ty), mask=ok)

    @triton.jit
    def _ce_fwd(x_ptr, target_ptr, loss_ptr, lse_ptr, cols, SOFTCAP: tl.constexpr, BLOCK: tl.constexpr):
        """Row program_id of x (rows, cols), contiguous: z = 2c sigmoid(2x/c) (= c tanh(x/c) + c: the shift leaves
        the cross-entropy as it is) in fp32, BLOCK columns at a time with a running max and sum of exp(z - max)."""
        row = tl.program_id(0).to(tl.int64)
        running_max = 0.0  # every z > 0, so 0 is a valid first max
        total = 0.0
        for start in range(0, cols, BLOCK):
            c = start + tl.arange(0, BLOCK)
            x = tl.load(x_ptr + row * cols + c, mask=c < cols, other=0.0).to(tl.float32)
            z = tl.where(c < cols, (2.0 * SOFTCAP) * tl.sigmoid(x * (2.0 / SOFTCAP)), float("-inf"))
            new_max = tl.maximum(running_max, tl.max(z, axis=0))
            total = total * tl.exp(running_max - new_max) + tl.sum(tl.exp(z - new_max), axis=0)
            running_max = new_max
        lse = running_max + tl.log(total)
        x_target = tl.load(x_ptr + row * cols + tl.load(target_ptr + row)).to(tl.float32)
        tl.store(lse_ptr + row, lse)
        tl.store(loss_ptr + row, lse - (2.0 * SOFTCAP) * tl.sigmoid(x_target * (2.0 / SOFTCAP)))

    @triton.jit
    def _ce_bwd(grad_ptr, x_ptr, target_ptr, lse_ptr, dx_ptr, cols, SOFTCAP: tl.constexpr, BLOCK: tl.constexpr):
        """dx = g (softmax(z) - onehot(target)) dz/dx with dz/dx = 4 s (1 - s), s = sigmoid(2x/c)."""
        row = tl.program_id(0).to(tl.int64)
        grad, lse, target = tl.load(grad_ptr + row), tl.load(lse_ptr + row), tl.load(target_ptr + row)
        for start in range(0, cols, BLOCK):
            c = start + tl.arange(0, BLOCK)
            x = tl.load(x_ptr + row * cols + c, mask=c < cols, other=0.0).to(tl.float32)
            s = tl.sigmoid(x * (2.0 / SOFTCAP))
            p = tl.exp((2.0 * SOFTCAP) * s - lse)
            dx = grad * (p - tl.where(c == target, 1.0, 0.0)) * (4.0 * s * (1.0 - s))
            tl.store(dx_ptr + row * cols + c, dx.to(dx_ptr.dtype.element_ty), mask=c < cols)

QK_BLOCK_ROWS, QK_NUM_WARPS = 16, 4  # rows of head_dim values per program (bench/qk_kernel.py sweeps these)
XSA_EPS = 1e-12  # F.normalize's default
# bench/mlp_kernel.py's fastest on H100; PROGRAMS_PER_SM n > 0: persistent, n per SM; 0: one program per tile
MLP_UP_LAUNCH = dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=4, PROGRAMS_PER_SM=1)
MLP_DOWN_LAUNCH = dict(MLP_UP_LAUNCH)
CE_BLOCK, CE_NUM_WARPS = 1024, 4  # columns per step of a row's loop (SPEC_0427 §6.5); bench/ce_kernel.py times them

def _register(name: str, forward: Callable, backward: Callable, setup_context: Callable, grad: Callable) -> Callable:
    """torch.ops.pgolf.<name> and <name>_backward as triton_ops, registered once per process (a reload reuses them)."""
    if not hasattr(torch.ops.pgolf, name):
        op = torch.library.triton_op("pgolf::" + name, mutates_args=())(forward)
        torch.library.triton_op("pgolf::%s_backward" % name, mutates_args=())(backward)
        op.register_autograd(grad, setup_context=setup_context)
    return getattr(torch.ops.pgolf, name)

def _qkv_launches(qkv: Tensor, head_dim: int, num_heads: int, rope_dims: int, has_value_embed: bool,
                  plain_v: bool) -> list:
    """Per part q, k, v of qkv: (heads, grid, (rows, heads, seq_len, the part's first column, x's strides), meta)."""
    batch, seq_len, width = qkv.shape
    kv_heads, launches = (width // head_dim - num_heads) // 2, []
    for part, (heads, column) in enumerate(((num_heads, 0), (kv_heads, num_heads * head_dim),
                                            (kv_heads, (num_heads + kv_heads) * head_dim))):
        rows = batch * seq_len * heads
        meta = dict(EPS=RMS_NORM_EPS, HEAD_DIM=head_dim, HALF=rope_dims // 2, ROPE=rope_dims, NORM_ROPE=part < 2,
                    HAS_GAIN=part == 0, HAS_ADD=part == 2 and has_value_embed, HAS_PLAIN=part == 2 and plain_v,
                    BLOCK_R=QK_BLOCK_ROWS, num_warps=QK_NUM_WARPS)
        launches.append((heads, (torch.sym_max(triton.cdiv(rows, QK_BLOCK_ROWS), 1),),
                         (rows, heads, seq_len, column, seq_len * width, width, head_dim), meta))
    return launches

def _qkv_heads_forward(qkv: Tensor, value_embed: Optional[Tensor], cos_full: Tensor, sin_full: Tensor,
                       gain: Tensor, num_heads: int, rope_dims: int, repeat: int,
                       plain_v: bool) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    qkv, head_dim = qkv.contiguous(), cos_full.size(1)
    launches = _qkv_launches(qkv, head_dim, num_heads, rope_dims, value_embed is not None, plain_v)
    plain = qkv.new_empty((*qkv.shape[:2], launches[2][0], head_dim) if plain_v else (0,))
    add = qkv if value_embed is None else value_embed.contiguous()  # qkv: unread, HAS_ADD is off
    outputs = []
    for part, (heads, grid, sizes, meta) in enumerate(launches):
        times = 1 if part == 0 else repeat
        outputs.append(qkv.new_empty(*qkv.shape[:2], heads * times, head_dim))
        torch.library.wrap_triton(_qkv_heads_fwd)[grid](
            qkv, cos_full, sin_full, gain, add if part == 2 else qkv, outputs[-1], plain, *sizes, times, **meta)
    return tuple(outputs) + (plain,)

def _qkv_heads_backward(dq: Tensor, dk: Tensor, dv: Tensor, d_plain: Tensor, qkv: Tensor, cos_full: Tensor,
                        sin_full: Tensor, gain: Tensor, num_heads: int, rope_dims: int, repeat: int, plain_v: bool,
                        has_value_embed: bool) -> Tuple[Tensor, Tensor, Tensor]:
    """(d_qkv, d_value_embed (empty without one), d_gain)."""
    qkv, head_dim, d_plain = qkv.contiguous(), cos_full.size(1), d_plain.contiguous()
    launches = _qkv_launches(qkv, head_dim, num_heads, rope_dims, has_value_embed, plain_v)
    d_qkv = qkv.new_empty(qkv.shape)
    d_add = qkv.new_empty(*qkv.shape[:2], launches[2][0] * head_dim if has_value_embed else 0)
    d_gain_rows = qkv.new_empty(qkv.size(0) * qkv.size(1) * num_heads, dtype=torch.float32)
    for part, ((heads, grid, sizes, meta), grad) in enumerate(zip(launches, (dq, dk, dv))):
        torch.library.wrap_triton(_qkv_heads_bwd)[grid](
            qkv, cos_full, sin_full, gain, grad, d_plain, d_qkv, d_add, d_gain_rows, *sizes, *grad.stride(),
            1 if part == 0 else repeat, **meta)
    return d_qkv, d_add, d_gain_rows.view(-1, num_heads).sum(0)

def _qkv_setup_context(ctx, inputs, output) -> None:
    qkv, value_embed, cos_full, sin_full, gain, *config = inputs  # config: num_heads, rope_dims, repeat, plain_v
    ctx.save_for_backward(qkv, cos_full, sin_full, gain)
    ctx.config, ctx.has_value_embed = config, value_embed is not None

def _qkv_grad(ctx, dq: Tensor, dk: Tensor, dv: Tensor, d_plain: Tensor) -> tuple:
    qkv, cos_full, sin_full, gain = ctx.saved_tensors
    d_qkv, d_add, d_gain = torch.ops.pgolf.qkv_heads_backward(dq, dk, dv, d_plain, qkv, cos_full, sin_full, gain,
                                                               *ctx.config, ctx.has_value_embed)
    return (d_qkv, d_add if ctx.has_value_embed else None, None, None, d_gain.to(gain.dtype)) + (None,) * 4

def fused_qkv_heads_op() -> Callable:
    """torch.ops.pgolf.qkv_heads: qkv_heads() (less the swap index), differentiable in qkv, value_embed and gain."""
    return _register("qkv_heads", _qkv_heads_forward, _qkv_heads_backward, _qkv_setup_context, _qkv_grad)

def _xsa_launch(y: Tensor, v: Tensor) -> tuple:
    """(y, contiguous v, output with y's strides, args, meta, grid); y is copied where empty_like can't keep them."""
    out = torch.empty_like(y)
    if out.stride() != y.stride():
        y = y.contiguous()
        out = torch.empty_like(y)
    rows = v.numel() // v.size(-1)
    meta = dict(EPS=XSA_EPS, HEAD_DIM=v.size(-1), BLOCK_R=QK_BLOCK_ROWS, num_warps=QK_NUM_WARPS)
    args = (rows, v.size(2), v.size(1), y.size(2) // v.size(2))
    return y, v.contiguous(), out, args, meta, (torch.sym_max(triton.cdiv(rows, QK_BLOCK_ROWS), 1),)

def _xsa_forward(y: Tensor, v: Tensor) -> Tensor:
    y, v, out, args, meta, grid = _xsa_launch(y, v)
    torch.library.wrap_triton(_xsa_fwd)[grid](y, v, out, *args, *y.stride(), **meta)
    return out

def _xsa_backward(grad: Tensor, y: Tensor, v: Tensor) -> Tuple[Tensor, Tensor]:
    y, v, dy, args, meta, grid = _xsa_launch(y, v)
    dv = torch.empty_like(v)
    torch.library.wrap_triton(_xsa_bwd)[grid](grad, y, v, dy, dv, *args, *y.stride(), *grad.stride(), **meta)
    return dy, dv

def fused_xsa_op() -> Callable:
    """torch.ops.pgolf.xsa: exclusive_self_attention() as one op, differentiable in y and v."""
    return _register("xsa", _xsa_forward, _xsa_backward, lambda ctx, inputs, output: ctx.save_for_backward(*inputs),
                     lambda ctx, grad: tuple(torch.ops.pgolf.xsa_backward(grad, *ctx.saved_tensors)))

def _mlp_launch(launch: dict, a: Tensor, outer: int) -> tuple:
    """(grid, meta) for A (M, K) times B into (M, outer) tiles; fp32 multiplies in full fp32 ("ieee"), not TF32. Sizes
    may be symbolic (a dynamic compiled graph): sym_min/sym_max keep a comparison with M out of the graph's guards."""
    meta = dict(launch)
    per_sm = meta.pop("PROGRAMS_PER_SM")
    tiles = triton.cdiv(a.size(0), meta["BLOCK_M"]) * triton.cdiv(outer, meta["BLOCK_N"])
    if per_sm:
        sms = torch.cuda.get_device_properties(a.device).multi_processor_count if a.is_cuda else 1  # 1: interpreter
        tiles = torch.sym_min(tiles, per_sm * sms)
    meta.update(SLOPE=LEAKY_SLOPE, PRECISION="ieee" if a.dtype == torch.float32 else "tf32")
    return (torch.sym_max(tiles, 1),), meta

def _mlp_forward(x: Tensor, w_up: Tensor, w_down: Tensor, save_hidden: bool) -> Tuple[Tensor, Tensor, Tensor]:
    rows, w_up = x.reshape(-1, x.size(-1)).contiguous(), w_up.contiguous()
    hidden_dim, dim = w_up.shape
    act = rows.new_empty(rows.size(0), hidden_dim)
    hidden = rows.new_empty(rows.size(0) if save_hidden else 0, hidden_dim)
    grid, meta = _mlp_launch(MLP_UP_LAUNCH, rows, hidden_dim)
    torch.library.wrap_triton(_mlp_up_act_fwd)[grid](
        rows, w_up, hidden, act, rows.size(0), hidden_dim, dim, rows.stride(0), w_up.stride(0), STORE_H=save_hidden,
        **meta)
    return torch.mm(act, w_down.t()).view(*x.shape[:-1], w_down.size(0)), hidden, act

def _mlp_backward(grad: Tensor, x: Tensor, w_up: Tensor, w_down: Tensor, hidden: Tensor, act: Tensor,
                  need_x: bool, need_w_up: bool, need_w_down: bool) -> Tuple[Tensor, Tensor, Tensor]:
    grad_rows, rows = grad.reshape(-1, grad.size(-1)).contiguous(), x.reshape(-1, x.size(-1))
    w_down = w_down.contiguous()
    hidden_dim, dim = w_up.shape
    d_hidden = hidden.new_empty(hidden.shape)
    grid, meta = _mlp_launch(MLP_DOWN_LAUNCH, grad_rows, hidden_dim)
    torch.library.wrap_triton(_mlp_act_grad_bwd)[grid](
        grad_rows, w_down, hidden, d_hidden, rows.size(0), hidden_dim, dim, grad_rows.stride(0), w_down.stride(0),
        **meta)
    dx = torch.mm(d_hidden, w_up).view(x.shape) if need_x else x.new_empty(0)
    dw_up = torch.mm(d_hidden.t(), rows) if need_w_up else w_up.new_empty(0)
    return dx, dw_up, torch.mm(grad_rows.t(), act) if need_w_down else w_down.new_empty(0)

def _mlp_setup_context(ctx, inputs, output) -> None:
    ctx.save_for_backward(*inputs[:3], *output[1:])  # x, w_up, w_down, hidden, act
    ctx.mark_non_differentiable(*output[1:])

def _mlp_grad(ctx, grad: Tensor, _grad_hidden, _grad_act) -> tuple:
    needed = tuple(bool(flag) for flag in ctx.needs_input_grad[:3])
    grads = torch.ops.pgolf.mlp_backward(grad, *ctx.saved_tensors, *needed)
    return tuple(g if need else None for g, need in zip(grads, needed)) + (None,)

def fused_mlp_op() -> Callable:
    """leaky_relu_sq_mlp() via torch.ops.pgolf.mlp (which also returns the hidden layers it saves under autograd)."""
    op = _register("mlp", _mlp_forward, _mlp_backward, _mlp_setup_context, _mlp_grad)
    return lambda x, w_up, w_down: op(x, w_up, w_down, torch.is_grad_enabled())[0]

def _ce_forward(logits: Tensor, targets: Tensor, softcap: float) -> Tuple[Tensor, Tensor]:
    """(each row's loss, its log-sum-exp) in fp32 for logits (rows, V) before the softcap."""
    logits, targets = logits.contiguous(), targets.contiguous()
    losses, lse = (logits.new_empty(logits.size(0), dtype=torch.float32) for _ in range(2))
    torch.library.wrap_triton(_ce_fwd)[(logits.size(0),)](
        logits, targets, losses, lse, logits.size(1), SOFTCAP=softcap, BLOCK=CE_BLOCK, num_warps=CE_NUM_WARPS)
    return losses, lse

def _ce_backward(grad: Tensor, logits: Tensor, targets: Tensor, lse: Tensor, softcap: float) -> Tensor:
    dx = torch.empty_like(logits)
    torch.library.wrap_triton(_ce_bwd)[(logits.size(0),)](
        grad.contiguous(), logits, targets, lse, dx, logits.size(1), SOFTCAP=softcap, BLOCK=CE_BLOCK,
        num_warps=CE_NUM_WARPS)
    return dx

def _ce_setup_context(ctx, inputs, output) -> None:
    ctx.save_for_backward(inputs[0].contiguous(), inputs[1].contiguous(), output[1])  # logits, targets, lse
    ctx.softcap = inputs[2]
    ctx.mark_non_differentiable(output[1])

def fused_ce_op() -> Callable:
    """torch.ops.pgolf.softcapped_ce: (logits (rows, V) before the softcap, targets, softcap) -> each row's
    cross-entropy of the softcapped logits (fp32), differentiable in the logits."""
    op = _register("softcapped_ce", _ce_forward, _ce_backward, _ce_setup_context, lambda ctx, grad, _grad_lse: (
        torch.ops.pgolf.softcapped_ce_backward(grad, *ctx.saved_tensors, ctx.softcap), None, None))
    return lambda logits, targets, softcap: op(logits, targets, softcap)[0]

def use_kernels(model: GPT, attention: str, qk: str = "torch", mlp: str = "torch", ce: str = "torch",
                doc_attention: str = "sdpa") -> None:
    """Sets the attention backends and the fused ops ("triton") or the PyTorch forms ("torch") on every block."""
    qkv_op, xsa_op = (fused_qkv_heads_op(), fused_xsa_op()) if qk == "triton" else (None, None)
    mlp_op = fused_mlp_op() if mlp == "triton" else None
    model.ce_op = fused_ce_op() if ce == "triton" else None
    for block in model.blocks:
        block.attn.backend, block.attn.qkv_op, block.attn.xsa_op, block.mlp_op = attention, qkv_op, xsa_op, mlp_op
        block.attn.doc_backend = doc_attention

def select_kernels(h: Hyperparameters, dist_info: DistInfo) -> Dict[str, Tuple[str, str]]:
    """The one start-up choice, {"attention"|"qk"|"mlp"|"ce": (choice, reason)}: a fused op unless the shapes rule
    it out, if its forward+backward at those shapes (the attention's GQA repeat too) matches the PyTorch form."""
    head_dim, dim, device = h.model_dim // h.num_heads, h.model_dim, dist_info.device
    attention = select_attention_backend(h, dist_info)
    repeat = 1 if attention[0] == "fa3" else h.num_heads // h.num_kv_heads  # as CausalSelfAttention calls the op
    block_k = next((launch["BLOCK_K"] for launch in (MLP_UP_LAUNCH, MLP_DOWN_LAUNCH) if dim % launch["BLOCK_K"]), 0)
    qk_rule = "head_dim=%d is not a power of two" % head_dim if head_dim & (head_dim - 1) else ""
    mlp_rule = "fused MLP op: model_dim=%d is not a multiple of BLOCK_K=%d" % (dim, block_k) if block_k else ""

    def kernel(env_name: str, setting: str, unsupported: str, probe: Callable[[], None]) -> Tuple[str, str]:
        if setting == "auto" and not dist_info.is_cuda:
            return "torch", "auto; CPU run"
        if triton is None:
            unsupported = "%s=triton needs the triton package (it ships with CUDA builds of torch)" % env_name
        return select_kernel(env_name, setting, ["triton", "torch"], {"triton": unsupported},
                             lambda name: name == "torch" or probe(), 160)
    return {"attention": attention, "doc_attention": select_doc_attention_backend(h, dist_info),
            "qk": kernel("QK_KERNEL", h.qk_kernel, qk_rule, lambda: _probe_qk_kernel(
                head_dim, h.rope_dims, device, h.num_heads, h.num_kv_heads, repeat)),
            "mlp": kernel("MLP_KERNEL", h.mlp_kernel, mlp_rule, lambda: _probe_mlp_kernel(
                dim, device, int(h.mlp_mult * dim))),
            "ce": kernel("CE_KERNEL", h.ce_kernel, "", lambda: _probe_ce_kernel(h.vocab_size, h.logit_softcap, device))}

def select_attention_backend(h: Hyperparameters, dist_info: DistInfo) -> Tuple[str, str]:
    """FA3 on Hopper, else the first SDPA backend that runs (Hopper: cuDNN first), or ATTN_BACKEND. Each SDPA backend
    is made the only one enabled for its probe, and the chosen one stays so."""
    if not dist_info.is_cuda:
        if h.attn_backend not in ("auto", "math"):
            raise ConfigError(["ATTN_BACKEND=%s needs CUDA; this run is on the CPU" % h.attn_backend])
        return "sdpa_cpu", "CPU run: PyTorch SDPA default kernel"
    hopper = torch.cuda.get_device_capability(dist_info.device)[0] == 9

    def runs(backend: str) -> None:
        if backend != "fa3":  # enable_{cudnn,flash,mem_efficient,math}_sdp
            for name in ("cudnn", "flash", "mem_efficient", "math"):
                getattr(torch.backends.cuda, "enable_%s_sdp" % name)(name.endswith(backend))
        _probe(lambda q: causal_attention(q, q[:, :, :1], q[:, :, :1], backend), None,
               [(1, h.train_seq_len, h.num_heads, h.model_dim // h.num_heads)], torch.bfloat16, dist_info.device)
    fa3 = "flash_attn_interface not importable" if _flash_attn_func is None else (
        "" if hopper else "FlashAttention-3 needs a Hopper GPU")
    candidates = (["fa3", "cudnn", "flash"] if hopper else ["flash", "cudnn"]) + ["efficient", "math"]
    return select_kernel("ATTN_BACKEND", h.attn_backend, candidates, {"fa3": fa3}, runs, 120)

def select_doc_attention_backend(h: Hyperparameters, dist_info: DistInfo) -> Tuple[str, str]:
    """Packed rows (TRAIN_LOADER=documents, the phased TTT's SGD): the first of FA3's varlen kernel, PyTorch's,
    FlexAttention and SDPA with a mask (rows of <= 8192 tokens) whose forward+backward on a packed row (pieces cut at
    64 tokens, empty trailing segments) matches per_document_attention(), or DOC_ATTN_BACKEND."""
    if not h.packed_rows:
        return "none", "TRAIN_LOADER=%s, no phased TTT: no packed rows" % h.train_loader
    ids = torch.randint(2, 9, (320,), generator=torch.Generator().manual_seed(0))
    ids[[0, 7, 200]] = BOS_ID  # documents of 7, 193 (4 pieces) and 120 tokens (2 pieces)
    cu_seqlens = torch.from_numpy(document_cu_seqlens(ids.numpy(), BOS_ID, 64, CU_SEQLENS_BUCKET)).to(dist_info.device)
    shapes = [(1, 320, heads, h.model_dim // h.num_heads) for heads in (h.num_heads, h.num_kv_heads, h.num_kv_heads)]
    row_tokens = max(h.train_batch_tokens // 8 if h.train_loader == "documents" else 0,
                     h.ttt_batch_seqs * h.train_seq_len if h.ttt_enabled and h.ttt_mode == "lora_phased" else 0)
    missing = "%s not importable (torch " + torch.__version__ + ")"
    unsupported = {"fa3_varlen": "" if _flash_attn_varlen_func else missing % "flash_attn_varlen_func",
                   "fa4_varlen": "" if _fa4 else missing % "flash_attn.cute.interface (flash-attn-4)",
                   "torch_varlen": "" if _torch_varlen_attn else missing % "torch.nn.attention.varlen.varlen_attn",
                   "flex": "" if _flex else missing % "torch.nn.attention.flex_attention",
                   "sdpa": "a (T, T) mask of T=%d tokens" % row_tokens if row_tokens > 8192 else ""}
    def reference(q: Tensor, k: Tensor, v: Tensor) -> Tensor:  # math SDPA: the dense choice (e.g. cuDNN alone
        with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):  # enabled) may reject the pieces
            return per_document_attention(q, k, v, cu_seqlens)
    runs = lambda backend: _probe(lambda q, k, v: document_attention(q, k, v, cu_seqlens, 64, backend), reference,
                                  shapes, torch.bfloat16 if dist_info.is_cuda else torch.float32, dist_info.device,
                                  "document attention", "out dq dk dv", 2e-2 if dist_info.is_cuda else 1e-4)
    return select_kernel("DOC_ATTN_BACKEND", h.doc_attn_backend, list(unsupported), unsupported, runs, 120)

def select_kernel(env_name: str, setting: str, candidates: Sequence[str], unsupported: Dict[str, str],
                  probe: Callable[[str], object], width: int) -> Tuple[str, str]:
    """(choice, reason): the first candidate (or the forced setting) that no shape rules out and whose probe runs;
    a forced one that cannot run is a ConfigError."""
    failures = []
    for name in candidates if setting == "auto" else [setting]:
        message = unsupported.get(name, "")
        if not message:
            try:
                probe(name)
                return name, "; ".join(["auto" if setting == "auto" else "forced by " + env_name] + failures)
            except Exception as exc:  # running it is the test of availability; every failure is reported
                message = str(exc).splitlines()[0][:width] if str(exc) else type(exc).__name__
        failures.append("%s unavailable (%s)" % (name, message))
        if setting != "auto":
            raise ConfigError(["%s=%s cannot run here: %s" % (env_name, name, message)])
    raise RunFailure("no attention backend works on this GPU: " + "; ".join(failures))  # a kernel ends in "torch"

def _probe(op: Callable, reference: Optional[Callable], shapes: Sequence[tuple], dtype: torch.dtype,
           device: torch.device, what: str = "", names: str = "", tolerance: float = 0.0) -> None:
    """Forward+backward of op on seeded random inputs of `shapes`; with a reference (the PyTorch form) each output and
    input gradient must be within tolerance * max(1, max |reference's|), else the error names the first that is not."""
    generator = torch.Generator().manual_seed(0)
    inputs = [torch.randn(shape, generator=generator).to(device, dtype).requires_grad_() for shape in shapes]
    results, grads = [], None
    for run in (op,) if reference is None else (op, reference):
        outputs = run(*inputs)
        outputs = outputs if isinstance(outputs, tuple) else (outputs,)
        grads = grads or [torch.randn(out.shape, generator=generator).to(device, dtype) for out in outputs]
        results.append(outputs + torch.autograd.grad(outputs, inputs, grads))
    if inputs[0].is_cuda:
        torch.cuda.synchronize(device)
    for name, got, want in zip(names.split(), *results):
        error = (got.float() - want.float()).abs().max().item()
        if not error <= tolerance * max(1.0, want.abs().max().item()):
            raise RuntimeError("%s differs from the PyTorch form: %s max error %.3g" % (what, name, error))

def _probe_qk_kernel(head_dim: int, rope_dims: int, device: torch.device, num_heads: int, kv_heads: int,
                     repeat: int) -> None:
    """The fused q/k/v and XSA ops vs their PyTorch forms: fp32, 2 x 16 tokens, a value embedding, v unrepeated too."""
    cos_full, sin_full, swap = rotary_tables(16, head_dim, rope_dims, 10000.0, device, torch.float32)
    config = (num_heads, rope_dims, repeat, True)
    _probe(lambda qkv, ve, gain: fused_qkv_heads_op()(qkv, ve, cos_full, sin_full, gain, *config),
           lambda qkv, ve, gain: qkv_heads(qkv, ve, cos_full, sin_full, swap, gain, *config),
           [(2, 16, (num_heads + 2 * kv_heads) * head_dim), (2, 16, kv_heads * head_dim), (num_heads,)],
           torch.float32, device, "fused q/k/v op", "q k v v_plain d_qkv d_value_embed d_gain", 1e-4)
    _probe(lambda y, v: fused_xsa_op()(y, v), exclusive_self_attention, [(2, 16, num_heads, head_dim),
           (2, 16, kv_heads, head_dim)], torch.float32, device, "fused XSA op", "forward dy dv", 1e-4)

def _probe_mlp_kernel(model_dim: int, device: torch.device, hidden_dim: int) -> None:
    """The fused MLP op vs leaky_relu_sq_mlp() in fp32 on the same bf16 inputs (200 rows: masked edge tiles), 3e-2."""
    _probe(lambda *inputs: fused_mlp_op()(*inputs), lambda *inputs: leaky_relu_sq_mlp(*(t.float() for t in inputs)),
           [(1, 200, model_dim), (hidden_dim, model_dim), (model_dim, hidden_dim)], torch.bfloat16, device,
           "fused MLP kernel", "forward dx dw_up dw_down", 3e-2)

def _probe_ce_kernel(vocab_size: int, softcap: float, device: torch.device) -> None:
    """The fused CE op's per-row losses and dx vs the PyTorch form on 37 rows of logits of the softcap's scale (where
    tanh bends): fp32 to 1e-4, then bf16, the training dtype, within its rounding of dx."""
    targets = torch.randint(vocab_size, (37,), generator=torch.Generator().manual_seed(0)).to(device)
    reference = lambda x: F.cross_entropy(softcap * torch.tanh(x.float() / softcap), targets, reduction="none")
    for dtype, tolerance in ((torch.float32, 1e-4), (torch.bfloat16, 1e-2)):
        _probe(lambda x: fused_ce_op()(x * softcap, targets, softcap), lambda x: reference(x * softcap),
               [(37, vocab_size)], dtype, device, "fused CE kernel", "loss dx", tolerance)

# ==== 6. OPTIMIZERS ====
# MUON_NS_COEFFICIENTS: (a, b, c) of step k's quintic aX + (bA + cA^2)X, A = XX^T, taken cyclically: the classic
# tuple every step (SPEC §5), or Polar Express's five (SPEC_0427 §6.3, exactly; step 6 starts the list again).
NS_COEFFICIENTS = {"quintic": ((3.4445, -4.7750, 2.0315),), "polar_express": (
    (8.156554524902461, -22.48329292557795, 15.878769915207462),
    (4.042929935166739, -2.808917465908714, 0.5000178451051316),
    (3.8916678022926607, -2.772484153217685, 0.5060648178503393),
    (3.285753657755655, -2.3681294933425376, 0.46449024233003106),
    (2.3465413258596377, -1.7097828382687081, 0.42323551169305323))}

def newton_schulz5(matrices: Tensor, steps: int, coefficients: Sequence[tuple] = NS_COEFFICIENTS["quintic"]) -> Tensor:
    """Batched quintic Newton-Schulz orthogonalisation (..., rows, cols) in the input dtype (bf16 on CUDA)."""
    transposed = matrices.size(-2) > matrices.size(-1)
    x = matrices.mT if transposed else matrices
    x = x / (x.norm(dim=(-2, -1), keepdim=True) + 1e-7)
    for step in range(steps):
        a, b, c = coefficients[step % len(coefficients)]
        gram = x @ x.mT
        x = a * x + (b * gram + c * (gram @ gram)) @ x
    return x.mT if transposed else x

class ParallelMuon(torch.optim.Optimizer):
    """Muon on the banks, no DDP; each bank row is one matrix (SPEC_0409 §5). Overlap (SPEC §5):
    launch_reduce_scatter() starts async AVG reduce-scatters of the zero-padded grads, largest bank first, while the
    caller steps Adam; step(), per bank: wait for its shard, Nesterov, MuonEq-R if on, NS5 on this rank's rows, async
    all-gather, and apply the previous bank's update meanwhile. Banks stay bit-identical across ranks."""
    def __init__(self, banks: List[nn.Parameter], h: Hyperparameters, dist_info: DistInfo):
        self.banks = sorted(banks, key=lambda p: -p.numel())  # stable: up, down, qo, kv for the record
        super().__init__(self.banks, dict(lr=h.matrix_lr, base_lr=h.matrix_lr, momentum=h.muon_momentum,
                                          weight_decay=h.muon_wd))
        self.dist_info, self.steps, self.row_normalize = dist_info, h.muon_backend_steps, h.muon_row_normalize
        self.coefficients = NS_COEFFICIENTS[h.muon_ns_coefficients]
        # MUON_DTYPE: reduce-scatter and momentum in bf16 (03-23) or fp32 (04-09's DDP); NS5 and the gathered update
        # in bf16 on CUDA either way; fp32 throughout on the CPU.
        cuda, world = dist_info.is_cuda, dist_info.world_size
        work_dtype = torch.bfloat16 if cuda and h.muon_dtype == "bf16" else torch.float32
        self.update_dtype = torch.bfloat16 if cuda else torch.float32
        # rows padded to a multiple of the world size; one process: the shard is all rows
        self.padded = [torch.zeros((ceil_div(bank.size(0), world) * world,) + bank.shape[1:], dtype=work_dtype,
                                   device=bank.device) for bank in self.banks]
        self.shards = [padded.new_empty((padded.size(0) // world,) + padded.shape[1:]) if world > 1 else padded
                       for padded in self.padded]
        self.gathered = [torch.empty_like(padded, dtype=self.update_dtype) if world > 1 else None
                         for padded in self.padded]
        self.reduce_handles = [None] * len(self.banks)
    @torch.no_grad()
    def launch_reduce_scatter(self) -> None:
        for index, (bank, padded, shard) in enumerate(zip(self.banks, self.padded, self.shards)):
            padded[:bank.size(0)].copy_(bank.grad)  # pad rows stay zero: NS5 keeps them zero
            if self.dist_info.distributed:
                self.reduce_handles[index] = dist.reduce_scatter_tensor(shard, padded, op=dist.ReduceOp.AVG,
                                                                        async_op=True)
    def reduced_shard(self, index: int) -> Tensor:
        """This rank's rows of bank `index`'s averaged gradient, once its reduce-scatter is done."""
        if self.reduce_handles[index] is not None:
            self.reduce_handles[index].wait()
            self.reduce_handles[index] = None
        return self.shards[index]
    @torch.no_grad()
    def step(self, closure=None) -> None:
        group, pending = self.param_groups[0], None

        def apply(bank: Tensor, update: Tensor, gather_handle) -> None:
            if gather_handle is not None:
                gather_handle.wait()
            scale = max(1.0, bank.size(-2) / bank.size(-1)) ** 0.5
            bank.mul_(1.0 - group["lr"] * group["weight_decay"])
            bank.add_(update[:bank.size(0)].to(bank.dtype), alpha=-group["lr"] * scale)
        for index, (bank, gathered) in enumerate(zip(self.banks, self.gathered)):
            shard, state = self.reduced_shard(index), self.state[bank]
            if "momentum" not in state:
                state["momentum"] = torch.zeros_like(shard)
            state["momentum"].mul_(group["momentum"]).add_(shard)
            nesterov = shard.add(state["momentum"], alpha=group["momentum"])
            if self.row_normalize:  # MuonEq-R (SPEC_0409 §5): in fp32, after Nesterov, before NS5
                nesterov = nesterov.float()
                nesterov = nesterov / nesterov.norm(dim=-1, keepdim=True).clamp_min(1e-7)
            update, gather_handle = newton_schulz5(nesterov.to(self.update_dtype), self.steps, self.coefficients), None
            if gathered is not None:
                gather_handle = dist.all_gather_into_tensor(gathered, update, async_op=True)
                update = gathered
            if pending is not None:
                apply(*pending)
            pending = (bank, update, gather_handle)
        apply(*pending)

GROUPED_ALL_REDUCE_NUMEL = 32768  # replicated grads this small share one all-reduce per dtype (SPEC_0427 §6.2)

def average_replicated_grads(grads: List[Tensor], dist_info: DistInfo) -> None:
    """AVG all-reduce in place, as one collective per tensor would (each element's sum is the same): every grad of
    <= GROUPED_ALL_REDUCE_NUMEL elements goes through one flat buffer per dtype (some 60 launches become 1-2), the
    large ones (tok_emb) each their own; all are in flight together, behind the banks' reduce-scatters."""
    if not dist_info.distributed:
        return
    small = [grad for grad in grads if grad.numel() <= GROUPED_ALL_REDUCE_NUMEL]
    work = [(grad, None) for grad in grads if grad.numel() > GROUPED_ALL_REDUCE_NUMEL]
    work += [(torch.cat([grad.reshape(-1) for grad in small if grad.dtype == dtype]), dtype)
             for dtype in dict.fromkeys(grad.dtype for grad in small)]
    handles = [dist.all_reduce(buffer, op=dist.ReduceOp.AVG, async_op=True) for buffer, _ in work]
    for handle, (buffer, dtype) in zip(handles, work):
        handle.wait()
        if dtype is not None:
            group = [grad for grad in small if grad.dtype == dtype]
            torch._foreach_copy_(group, [part.view_as(grad) for part, grad in
                                         zip(buffer.split([grad.numel() for grad in group]), group)])

class Optimizers:
    """Muon for the banks; AdamW for the embeddings (a group each) and the scalars/small matrices; Adam for an untied
    head. step() keeps the record's order: reduce-scatters out, small all-reduces, Adam, Muon."""
    def __init__(self, h: Hyperparameters, model: GPT, dist_info: DistInfo):
        self.dist_info = dist_info
        banks = [model.qo_bank, model.kv_bank, model.mlp_up_bank, model.mlp_down_bank]
        embeddings = [model.tok_emb.weight] + [table.embed.weight for table in (model.bigram, model.ve_shared)
                                               if table is not None]
        head = [model.lm_head.weight] if model.lm_head is not None else []
        special = {id(p) for p in banks + embeddings + head}
        scalars = [p for p in model.parameters() if id(p) not in special]
        token_lr = h.tied_embed_lr if h.tie_embeddings else h.embed_lr
        adam_args = dict(betas=(h.beta1, h.beta2), eps=h.adam_eps, fused=dist_info.is_cuda)
        self.adams = [
            torch.optim.AdamW([dict(params=[p], lr=token_lr, base_lr=token_lr) for p in embeddings],
                              weight_decay=h.embed_wd, **adam_args),
            torch.optim.AdamW([dict(params=scalars, lr=h.scalar_lr, base_lr=h.scalar_lr)],
                              weight_decay=h.adam_wd, **adam_args),
        ] + ([torch.optim.Adam([dict(params=head, lr=h.head_lr, base_lr=h.head_lr)], **adam_args)] if head else [])
        self.muon = ParallelMuon(banks, h, dist_info)
        self.replicated_params = embeddings + scalars + head
        self.clip_norm = h.grad_clip_norm if h.grad_clip_scope == "reduced" else 0.0
        self.all = [self.muon] + self.adams
    def set_schedule(self, lr_scale: float, muon_momentum: float) -> None:
        for optimizer in self.all:
            for group in optimizer.param_groups:
                group["lr"] = group["base_lr"] * lr_scale
        self.muon.param_groups[0]["momentum"] = muon_momentum
    def step(self) -> None:
        self.muon.launch_reduce_scatter()
        average_replicated_grads([param.grad for param in self.replicated_params], self.dist_info)
        if self.clip_norm > 0:
            self.clip_reduced_grads()
        for adam in self.adams:
            adam.step()
        self.muon.step()
    @torch.no_grad()
    def clip_reduced_grads(self) -> None:
        """GRAD_CLIP_SCOPE=reduced: clip_grad_norm_ of the averaged grads (04-09, after DDP). The banks' squared norms
        are summed over their rank shards (pad rows zero), the replicated grads' added once."""
        shards = [self.muon.reduced_shard(index) for index in range(len(self.muon.banks))]
        grads = [param.grad for param in self.replicated_params]
        banked = all_reduce_(torch.stack(torch._foreach_norm(shards)).float().square().sum(), self.dist_info, "sum")
        total = (banked + torch.stack(torch._foreach_norm(grads)).float().square().sum()).sqrt()
        coefficient = (self.clip_norm / (total + 1e-6)).clamp_max(1.0)  # as clip_grad_norm_
        torch._foreach_mul_(shards + grads, coefficient)
    def zero_grad(self) -> None:
        for optimizer in self.all:
            optimizer.zero_grad(set_to_none=True)

def training_fraction(h: Hyperparameters, step: int, elapsed_ms: float) -> float:
    """Share of training done: of the time budget when capped (SPEC_0409 §5), else of ITERATIONS."""
    return elapsed_ms / h.train_budget_ms if h.train_budget_ms is not None else step / max(h.iterations, 1)

def lr_scale_at(h: Hyperparameters, step: int, elapsed_ms: float) -> float:
    """Warmdown multiplier (>= MIN_LR once begun): linear to 0 over the last WARMDOWN_FRAC of training, else over the
    last WARMDOWN_ITERS steps (when capped: that many average steps of time)."""
    if h.warmdown_frac > 0:
        frac = training_fraction(h, step, elapsed_ms)
        return 1.0 if frac < 1.0 - h.warmdown_frac else max((1.0 - frac) / h.warmdown_frac, h.min_lr)
    if h.warmdown_iters <= 0:
        return 1.0
    if h.train_budget_ms is None:
        remaining, warmdown = h.iterations - step, h.warmdown_iters
    else:
        remaining, warmdown = max(h.train_budget_ms - elapsed_ms, 0.0), h.warmdown_iters * (elapsed_ms / max(step, 1))
    return 1.0 if remaining > warmdown else max(remaining / max(warmdown, 1e-9), h.min_lr)

def muon_momentum_at(h: Hyperparameters, step: int) -> float:
    frac = min(step / h.muon_momentum_warmup_steps, 1.0) if h.muon_momentum_warmup_steps > 0 else 1.0
    return (1.0 - frac) * h.muon_momentum_warmup_start + frac * h.muon_momentum

# ==== 7. WEIGHT AVERAGING ====
class WeightAverages:
    """fp32 EMA of the state_dict every step and, with SWA_ENABLED and EMA_ENABLED=0 (the EMA wins, as in the
    record), a CPU fp32 sum of snapshots every SWA_EVERY steps once the LR scale is below 0.2. The state_dict holds
    detached views of the live weights, so neither update records autograd history."""
    def __init__(self, h: Hyperparameters, model: nn.Module):
        self.h, self.live, self.swa_enabled = h, model.state_dict(), h.swa_enabled and not h.ema_enabled
        self.ema = {k: t.float().clone() for k, t in self.live.items()} if h.ema_enabled else None
        self.swa_sum, self.swa_count = None, 0
    def update_ema(self) -> None:
        if self.ema is not None:
            live = [self.live[k].float() for k in self.ema]
            torch._foreach_lerp_(list(self.ema.values()), live, 1.0 - self.h.ema_decay)
    def maybe_accumulate_swa(self, step: int, lr_scale: float) -> bool:
        """Adds a snapshot on SWA steps; True when it was the first (the caller logs `swa:start`)."""
        if not (self.swa_enabled and lr_scale < 0.2 and step % self.h.swa_every == 0):
            return False
        # a copy: .float().cpu() of an fp32 CPU tensor is that tensor, which the optimizer keeps changing
        snapshot = {k: t.to(device="cpu", dtype=torch.float32, copy=True) for k, t in self.live.items()}
        self.swa_sum = snapshot if self.swa_sum is None else {k: self.swa_sum[k] + t for k, t in snapshot.items()}
        self.swa_count += 1
        return self.swa_count == 1

def apply_weight_average(logger, model: nn.Module, averages: WeightAverages) -> str:
    """Loads the EMA or the SWA snapshots' mean into `model`, in its dtypes; returns "ema", "swa" or "raw" (none)."""
    if averages.swa_enabled and averages.swa_count == 0:
        logger.log("swa:no_snapshots (the LR scale never fell below 0.2 on a snapshot step)")
    if averages.swa_count > 0:
        source, kind = {k: t / averages.swa_count for k, t in averages.swa_sum.items()}, "swa"
        logger.log(f"swa:applying SWA weights snapshots:{averages.swa_count}")
    elif averages.ema is not None:
        source, kind = averages.ema, "ema"
        logger.log("ema:applying EMA weights")
    else:
        logger.log("ema:disabled keeping the trained weights")
        return "raw"
    model.load_state_dict({k: source[k].to(device=t.device, dtype=t.dtype) for k, t in model.state_dict().items()})
    return kind

# ==== 8. EVALUATION ====
RECORD_EVAL_STRIDE = 64  # parsers compare sliding scores at the record's stride

@dataclass(frozen=True)
class ByteTables:
    base_bytes: Tensor  # int64 (V,): UTF-8 bytes of the piece without its leading "▁"
    has_leading_space: Tensor  # bool (V,): the piece starts with "▁" (one more byte unless after a boundary)
    is_boundary: Tensor  # bool (V,): control/unknown/unused ids (0 bytes, and no space byte after them)

def build_byte_tables(sp, vocab_size: int) -> ByteTables:
    """SPEC §8 byte accounting for a SentencePiece model (on the CPU); its vocab must equal VOCAB_SIZE."""
    base, space = np.zeros(vocab_size, dtype=np.int64), np.zeros(vocab_size, dtype=np.bool_)
    boundary = np.ones(vocab_size, dtype=np.bool_)
    for token_id in range(sp.vocab_size()):
        if sp.is_control(token_id) or sp.is_unknown(token_id) or sp.is_unused(token_id):
            continue
        boundary[token_id] = False
        if sp.is_byte(token_id):
            base[token_id] = 1
            continue
        piece = sp.id_to_piece(token_id)
        space[token_id] = piece.startswith("\u2581")
        base[token_id] = len(piece.removeprefix("\u2581").encode("utf-8"))
    return ByteTables(*(torch.from_numpy(table) for table in (base, space, boundary)))

def count_target_bytes(prev_ids: Tensor, target_ids: Tensor, tables: ByteTables) -> Tensor:
    """Bytes each target adds: its own, plus 1 for a leading space unless it follows a boundary token."""
    extra = tables.has_leading_space[target_ids] & ~tables.is_boundary[prev_ids]
    return tables.base_bytes[target_ids] + extra.to(torch.int64)

@dataclass(frozen=True)
class ValidationData:
    tokens: np.ndarray  # uint16, trimmed to k*Lv + 1 tokens so every length-Lv sequence is full
    target_bytes: Tensor  # int32 (num_targets,) on the device: the text bytes of target j = tokens[j + 1]
    @property
    def num_targets(self) -> int:
        return self.tokens.size - 1

CASEOPS_CONTROLS = "\ue001\ue002\ue003\ue004"  # SPEC_0427 §2: TITLE, ALLCAPS, CAPNEXT, ESC, user-defined pieces

def load_byte_sidecar(h: Hyperparameters, sp, val_paths: List[str], val_counts: List[int]) -> Optional[np.ndarray]:
    """SPEC_0427 §2: per val token, the original UTF-8 bytes it covers (0 for BOS); None for plain data. A CaseOps
    tokenizer, sidecars as long as their shards and the manifest's stats.bytes_val agree, or bpb has wrong bytes."""
    manifest_path, dataset = dataset_manifest(h.data_path)
    caseops = set(CASEOPS_CONTROLS) <= {sp.id_to_piece(token_id) for token_id in range(sp.vocab_size())}
    sidecars = [os.path.join(h.data_path, "fineweb_val_bytes_" + os.path.basename(path)[12:]) for path in val_paths]
    if not glob.glob(os.path.join(h.data_path, "fineweb_val_bytes_*.bin")):
        if dataset.get("text_transform"):
            raise DataError("%s says the shards are %s, but %s has no byte sidecar %s: their bpb needs it" % (
                manifest_path, dataset["text_transform"], h.data_path, sidecars[0]))
        if caseops:
            raise DataError("TOKENIZER_PATH=%s is a CaseOps tokenizer (pieces U+E001-U+E004), but %s is plain "
                            "(no byte sidecar %s)" % (h.tokenizer_path, val_paths[0], sidecars[0]))
        return None
    if not caseops:
        raise DataError("%s is a CaseOps byte sidecar, but TOKENIZER_PATH=%s is not a CaseOps tokenizer (no pieces "
                        "U+E001-U+E004)" % (sidecars[0], h.tokenizer_path))
    parts = []
    for val_path, sidecar, count in zip(val_paths, sidecars, val_counts):
        if not os.path.isfile(sidecar):
            raise DataError("%s has no byte sidecar %s" % (val_path, sidecar))
        parts.append(load_data_shard(sidecar))
        if parts[-1].size != count:
            raise DataError("%s holds %d byte counts, but %s holds %d tokens: one per token expected"
                            % (sidecar, parts[-1].size, val_path, count))
    counts, expected = np.concatenate(parts), dataset.get("stats", {}).get("bytes_val")
    remedy = "tools/py data/write_manifest.py %s --tokenizer %s" % (h.data_path, h.tokenizer_path)
    if int(counts.sum(dtype=np.int64)) != expected:  # data/ writes stats.bytes_val when it builds or downloads
        raise DataError("%s (and the other byte sidecars) total %d bytes, but datasets[0].stats.bytes_val of %s is %s%s"
                        % (sidecars[0], counts.sum(dtype=np.int64), manifest_path, expected, "" if expected else
                           "; for shards made elsewhere, %s%s writes it" % (remedy, " --overwrite" * bool(dataset))))
    return counts

def load_validation_data(h: Hyperparameters, sp, device: torch.device) -> ValidationData:
    """The val tokens and each target's byte count: from the byte sidecar if there is one, else from the pieces."""
    paths = list_shards(h.val_files, "validation")
    shards = [load_data_shard(path) for path in paths]
    tokens, seq_len = np.concatenate(shards), max(h.train_seq_len, h.effective_eval_seq_len)
    usable = ((tokens.size - 1) // seq_len) * seq_len
    if usable <= 0:
        raise DataError("validation shards %s hold %d tokens: fewer than one sequence of %d + 1"
                        % (h.val_files, tokens.size, seq_len))
    too_large = int(tokens[:usable + 1].max())
    if too_large >= h.vocab_size:
        raise DataError("validation shards %s hold token id %d >= VOCAB_SIZE=%d"
                        % (h.val_files, too_large, h.vocab_size))
    sidecar = load_byte_sidecar(h, sp, paths, [shard.size for shard in shards])
    if sidecar is None:
        ids = torch.from_numpy(tokens[:usable + 1].astype(np.int64))
        target_bytes = count_target_bytes(ids[:-1], ids[1:], build_byte_tables(sp, h.vocab_size))
    else:  # entry j + 1 belongs to token j + 1, i.e. to target j
        target_bytes = torch.from_numpy(sidecar[1:usable + 1].astype(np.int32))
    return ValidationData(tokens[:usable + 1], target_bytes.to(device, torch.int32))

def bits_per_byte(nll_sum: float, token_count: float, byte_count: float) -> Tuple[float, float]:
    val_loss = nll_sum / token_count
    return val_loss, val_loss / math.log(2.0) * (token_count / byte_count)

def reduced_loss_and_bpb(sums: Tensor, dist_info: DistInfo) -> Tuple[float, float]:
    """(val_loss, val_bpb) of this rank's fp64 [nll, targets, bytes] `sums` (left as is) summed over all ranks."""
    return bits_per_byte(*all_reduce_(sums.clone(), dist_info, "sum").tolist())

def plain_eval(h: Hyperparameters, dist_info: DistInfo, model: nn.Module, val: ValidationData,
               loss_sum: Optional[Callable] = None, batch_seqs: int = 0, seq_len: int = 0) -> Tuple[float, float]:
    """SPEC §8 plain eval of non-overlapping seq_len (TRAIN_SEQ_LEN) sequences split contiguously by rank; loss_sum(x,
    y, *cu_seqlens): a batch's fp64 nll sum (default: the training forward's, batches of VAL_BATCH_SIZE / (world * GA)
    tokens). A model trained on documents (TRAIN_LOADER=documents) gets each batch as one packed row, documents apart
    (SPEC_0427 §5's diagnostic evals, but every target)."""
    seq_len = seq_len or h.train_seq_len
    loss_sum = loss_sum or (lambda x, y, *cu: model(x, y, *cu).double() * (y >= 0).sum())
    batch_seqs = batch_seqs or (h.val_batch_size // (dist_info.world_size * dist_info.grad_accum_steps)) // seq_len
    first, last = rank_range(val.num_targets // seq_len, dist_info)
    specs = [(start, min(start + batch_seqs, last)) for start in range(first, last, batch_seqs)]
    def build(spec):
        window = val.tokens[spec[0] * seq_len:spec[1] * seq_len + 1].astype(np.int64)
        if h.train_loader == "documents":  # padded at the end to a full batch (one shape): causal attention keeps
            pad = (0, (batch_seqs - spec[1] + spec[0]) * seq_len)  # it out of the real tokens, CE ignores its -100s
            x, y = np.pad(window[:-1], pad)[None], np.pad(window[1:], pad, constant_values=-100)[None]
            return x, y, document_cu_seqlens(x[0], BOS_ID, seq_len, CU_SEQLENS_BUCKET)
        return window[:-1].reshape(-1, seq_len), window[1:].reshape(-1, seq_len)
    sums, was_training = torch.zeros(3, dtype=torch.float64, device=dist_info.device), model.training
    sums[2] = val.target_bytes[first * seq_len:last * seq_len].sum()  # this rank's targets
    model.eval()
    with torch.inference_mode(), make_val_feeder(h, dist_info, specs, build) as feed:
        for _, (x, y, *cu_seqlens) in feed:
            for entries in cu_seqlens:  # any number of segments: one compiled graph
                torch._dynamo.mark_dynamic(entries, 0)
            with autocast_context(dist_info):
                sums[0] += loss_sum(x, y, *cu_seqlens)
            sums[1] += (y >= 0).sum()
    model.train(was_training)
    return reduced_loss_and_bpb(sums, dist_info)

def make_hidden_forward(h, dist_info, model: nn.Module) -> Callable:
    """ids -> hidden states, compiled once per model (dynamic=False: callers keep one batch shape)."""
    compiled = compile_enabled(h, dist_info)
    return torch.compile(model.forward_hidden, dynamic=False, fullgraph=True) if compiled else model.forward_hidden

def scoring_loss_sum(model: nn.Module, hidden_forward: Callable, rows: int) -> Callable:
    """plain_eval's loss_sum for the final evals: per-target nll summed in fp64, batches padded to `rows` sequences
    (a packed row comes padded; its -100 targets add 0)."""
    def loss_sum(x: Tensor, y: Tensor, *cu_seqlens: Tensor) -> Tensor:
        padded = x if cu_seqlens else F.pad(x, (0, 0, 0, rows - x.size(0)))
        logits = model.logits_from_hidden(hidden_forward(padded, None, *cu_seqlens))[:x.size(0)]
        return F.cross_entropy(logits.float().flatten(0, 1), y.flatten(), reduction="none").double().sum()
    return loss_sum

def device_tokens(validation_data: ValidationData, device: torch.device) -> Tensor:
    """The val tokens as one int32 device tensor: sliding and TTT batches are gathered from it, no H2D copies."""
    return torch.from_numpy(validation_data.tokens.astype(np.int32)).to(device)

def sliding_window_starts(num_targets: int, window_len: int, stride: int) -> Tensor:
    """SPEC §8, every target scored exactly once: window 0 scores targets [0, window_len), window ws > 0 scores
    [ws+window_len-stride, ws+window_len); no window starts whose run would begin past the end."""
    later_windows = max(0, ceil_div(num_targets - window_len, stride))
    return torch.arange(later_windows + 1, dtype=torch.int64) * stride

def window_first_scored(window_starts: Tensor, window_len: int, stride: int) -> Tensor:
    return torch.where(window_starts == 0, 0, window_starts + window_len - stride)

def build_window_batch(tokens: Tensor, window_starts: Tensor, seq_len: int, stride: int) -> tuple:
    """-> x, y (B, seq_len) int64, score_mask bool (target j is tokens[j + 1]). Positions past the end are zero and
    unscored (causal attention keeps them from scored ones); a start >= num_targets is all padding."""
    num_targets = tokens.numel() - 1
    positions = window_starts[:, None] + torch.arange(seq_len, device=tokens.device)
    inside, safe = positions < num_targets, positions.clamp_max(num_targets - 1)
    x, y = torch.where(inside, tokens[safe].long(), 0), torch.where(inside, tokens[safe + 1].long(), 0)
    score_mask = inside & (positions >= window_first_scored(window_starts, seq_len, stride)[:, None])
    return x, y, score_mask

def score_windows(h, dist_info, model, hidden_forward, tokens, target_bytes, window_starts: Tensor, window_len: int,
                  stride: int, sums: Tensor) -> None:
    """Adds this rank's contiguous share of `window_starts` (CPU) to the fp64 [nll, targets, bytes] `sums`, no host
    syncs; batches padded to EVAL_BATCH_SEQS; only scored positions reach the output projection."""
    first, last = rank_range(window_starts.numel(), dist_info)
    window_starts, batch_seqs, num_targets = window_starts[first:last], h.eval_batch_seqs, tokens.numel() - 1
    device_starts = F.pad(window_starts, (0, -window_starts.numel() % batch_seqs), value=num_targets).to(tokens.device)
    with torch.inference_mode():
        for begin in range(0, window_starts.numel(), batch_seqs):
            first_position = 0 if bool((window_starts[begin:begin + batch_seqs] == 0).any()) else window_len - stride
            starts = device_starts[begin:begin + batch_seqs]
            x, y, score_mask = build_window_batch(tokens, starts, window_len, stride)
            with autocast_context(dist_info):
                logits = model.logits_from_hidden(hidden_forward(x)[:, first_position:])
            y, score_mask = y[:, first_position:], score_mask[:, first_position:]
            nll = F.cross_entropy(logits.float().flatten(0, 1), y.flatten(), reduction="none").view_as(y)
            positions = starts[:, None] + torch.arange(first_position, window_len, device=tokens.device)
            accumulate_scores(sums, nll, score_mask, positions.clamp_max(num_targets - 1), target_bytes)

def sliding_window_eval(h, dist_info, model: nn.Module, hidden_forward: Callable, tokens: Tensor, target_bytes,
                        stride: int) -> tuple:
    """Sliding-window (val_loss, val_bpb) over `tokens` (device_tokens), windows split contiguously by rank."""
    starts = sliding_window_starts(tokens.numel() - 1, h.effective_eval_seq_len, stride)
    sums = torch.zeros(3, dtype=torch.float64, device=dist_info.device)
    model.eval()
    score_windows(h, dist_info, model, hidden_forward, tokens, target_bytes, starts, h.effective_eval_seq_len, stride,
                  sums)
    return reduced_loss_and_bpb(sums, dist_info)

def assign_windows_to_chunks(window_starts: Tensor, window_len: int, stride: int, num_targets: int,
                             chunk_tokens: int) -> list:
    """Window starts per chunk of their first scored target (the last chunk takes any overflow): a target is scored
    in its own chunk or an earlier one, never after its chunk was trained on."""
    num_chunks = ceil_div(num_targets, chunk_tokens)
    chunk_of_window = (window_first_scored(window_starts, window_len, stride) // chunk_tokens).clamp_max(num_chunks - 1)
    return list(torch.split(window_starts, torch.bincount(chunk_of_window, minlength=num_chunks).tolist()))

def prepare_ttt_parameters(model: nn.Module, freeze_blocks: int) -> tuple:
    """-> (trainable params, {param index: frozen bank rows}, frozen count). Blocks 0..k-1 are frozen whole: their
    tensors by requires_grad, their bank rows by zeroing those grad rows after the all-reduce (SGD, no decay)."""
    trainable, frozen_bank_rows, frozen_count = [], {}, 0
    for name, param in model.named_parameters():
        if name.startswith(tuple(f"blocks.{layer}." for layer in range(freeze_blocks))):
            param.requires_grad_(False)
            frozen_count += param.numel()
            continue
        parts = BANK_LAYOUT.get(name)
        if parts is not None and freeze_blocks > 0:
            num_layers = param.shape[0] // len(parts)
            rows = [part * num_layers + layer for part in range(len(parts)) for layer in range(freeze_blocks)]
            frozen_bank_rows[len(trainable)] = torch.tensor(rows, device=param.device)
            frozen_count += len(rows) * param[0].numel()
        param.grad = torch.zeros_like(param)  # ranks without a sequence still all-reduce a (zero) gradient
        trainable.append(param)
    return trainable, frozen_bank_rows, frozen_count

def train_on_chunk(h, dist_info, model: nn.Module, optimizer, trainable: list, frozen_bank_rows: dict,
                   tokens: Tensor, chunk_begin: int, chunk_end: int) -> None:
    """TTT_EPOCHS passes over the chunk's whole sequences (targets [chunk_begin, chunk_end), all scored already).
    Every rank takes the same number of steps, so the per-tensor AVG all-reduces pair up."""
    seq_len, num_sequences = h.train_seq_len, (chunk_end - chunk_begin) // h.train_seq_len
    first_sequence, end_sequence = rank_range(num_sequences, dist_info)
    steps_per_epoch = ceil_div(ceil_div(num_sequences, dist_info.world_size), h.ttt_batch_seqs)
    model.train()
    for _ in range(h.ttt_epochs):
        for step in range(steps_per_epoch):
            optimizer.zero_grad(set_to_none=False)
            begin = first_sequence + step * h.ttt_batch_seqs
            end = min(begin + h.ttt_batch_seqs, end_sequence)
            if end > begin:
                span = tokens[chunk_begin + begin * seq_len:chunk_begin + end * seq_len + 1].long()
                x, y, packed = span[:-1].view(-1, seq_len), span[1:].view(-1, seq_len), ()
                if h.ttt_mode == "lora_phased":  # SPEC_0427 §10.5: one packed row, document-aware, as in training
                    x, y = x.reshape(1, -1), y.reshape(1, -1)
                    packed = (torch.from_numpy(document_cu_seqlens(x[0].cpu().numpy(), BOS_ID, seq_len,
                                                                   CU_SEQLENS_BUCKET)).to(x.device),)
                with autocast_context(dist_info):
                    loss = model(x, y, *packed)
                loss.backward()
            for param in trainable:
                all_reduce_(param.grad, dist_info, op="avg")
            for index, rows in frozen_bank_rows.items():
                trainable[index].grad.index_fill_(0, rows, 0.0)
            torch.nn.utils.clip_grad_norm_(trainable, h.ttt_grad_clip)  # on the reduced grads (SPEC §11.10)
            optimizer.step()
    model.eval()

def ttt_eval(h, dist_info, logger, model: nn.Module, hidden_forward: Callable, tokens: Tensor, target_bytes) -> tuple:
    """Legal score-first TTT (SPEC §8): each chunk is scored under inference_mode with the current weights before it
    is trained on (all but the last chunk); windows and sequences are TRAIN_SEQ_LEN long."""
    started = time.perf_counter()
    window_len, stride, num_targets = h.train_seq_len, h.eval_stride, tokens.numel() - 1
    starts = sliding_window_starts(num_targets, window_len, stride)
    chunks = assign_windows_to_chunks(starts, window_len, stride, num_targets, h.ttt_chunk_tokens)
    logger.log(f"ttt_sliding:start chunks={len(chunks)} chunk_tokens={h.ttt_chunk_tokens} "
               f"total_windows={starts.numel()} stride={stride} ttt_lr={h.ttt_lr} ttt_epochs={h.ttt_epochs} "
               f"freeze_blocks={h.ttt_freeze_blocks}")
    trainable, frozen_bank_rows, frozen_count = prepare_ttt_parameters(model, h.ttt_freeze_blocks)
    total_count = sum(param.numel() for param in model.parameters())
    logger.log(f"ttt_sliding:params unfrozen={total_count - frozen_count} frozen={frozen_count}")
    optimizer = torch.optim.SGD(trainable, lr=h.ttt_lr, momentum=h.ttt_momentum)
    sums, last_chunk = torch.zeros(3, dtype=torch.float64, device=dist_info.device), len(chunks) - 1
    model.eval()
    for chunk_index, chunk_starts in enumerate(chunks):
        score_windows(h, dist_info, model, hidden_forward, tokens, target_bytes, chunk_starts, window_len, stride, sums)
        if chunk_index < last_chunk:  # chunk k's targets were all scored just above (or in an earlier chunk)
            chunk_begin = chunk_index * h.ttt_chunk_tokens
            for group in optimizer.param_groups:
                group["lr"] = h.ttt_lr * 0.5 * (1.0 + math.cos(math.pi * chunk_index / max(last_chunk, 1)))
            train_on_chunk(h, dist_info, model, optimizer, trainable, frozen_bank_rows, tokens, chunk_begin,
                           min(chunk_begin + h.ttt_chunk_tokens, num_targets))
        if chunk_index % 10 == 0 or chunk_index == last_chunk:
            running_bpb = reduced_loss_and_bpb(sums, dist_info)[1]  # over all ranks
            logger.log(f"  ttt_chunk [{chunk_index + 1}/{len(chunks)}] bpb={running_bpb:.6f} "
                       f"time={time.perf_counter() - started:.1f}s")
    for param in model.parameters():
        param.requires_grad_(True)
        param.grad = None
    val_loss, val_bpb = reduced_loss_and_bpb(sums, dist_info)
    logger.log(f"ttt_sliding:done val_loss={val_loss:.6f} val_bpb={val_bpb:.6f} "
               f"elapsed={time.perf_counter() - started:.1f}s")
    return val_loss, val_bpb

# Phased score-first LoRA TTT (SPEC_0427 §10): documents of the val stream, batched per rank, each scored chunk by
# chunk before its own adapters train on that chunk; at phase boundaries global SGD on documents scored already.
def document_spans(tokens: Tensor) -> Tensor:
    """(docs, 2) int64 CPU [first target, end target) per document (SPEC_0427 §10.2): a document starts at target 0
    and at each BOS input and ends with the next BOS as its last target (target j is tokens[j + 1])."""
    num_targets = tokens.numel() - 1
    starts = torch.nonzero(tokens[1:num_targets] == BOS_ID).flatten().cpu() + 1
    starts = torch.cat((torch.zeros(1, dtype=torch.int64), starts))
    return torch.stack((starts, torch.cat((starts[1:], torch.tensor([num_targets])))), dim=1)

def ttt_queue(spans: Tensor, batch_docs: int) -> Tuple[List[Tensor], Tensor]:
    """Documents sorted by length (stable), batched, the batch with the longest document first; -> (the batches'
    document ids in queue order, all ids in ascending-length order: the record's order of gathered documents)."""
    lengths = spans[:, 1] - spans[:, 0]
    order = torch.sort(lengths, stable=True).indices
    batches = list(order.split(batch_docs))
    return sorted(batches, key=lambda docs: -int(lengths[docs].max())), order  # sorted() is stable

class BatchedLoRA(nn.Module):
    """SPEC_0427 §10.4: per document row d of a batch, rank-r adapters on each block call's ("slot's") q, k, v, o and
    MLP and on the head: delta_d(x) = (alpha / r) (x A_d^T) B_d^T, A_d (r, in) ~ U(+-1/sqrt(in)), B_d (out, r). All
    read the normed input of their branch (or of the head); the model adds o's and MLP's before the branch scale."""
    def __init__(self, h: Hyperparameters, slots: int, rows: int, device: torch.device):
        super().__init__()
        dim, kv_dim, rank = h.model_dim, h.num_kv_heads * (h.model_dim // h.num_heads), h.ttt_lora_rank
        outs = dict(q=dim, k=kv_dim, v=kv_dim, o=dim, mlp=dim, head=h.vocab_size)
        shape = lambda kind, *tail: (1 if kind == "head" else slots, rows) + tail
        self.a = nn.ParameterDict({k: nn.Parameter(torch.empty(shape(k, rank, dim), device=device)) for k in outs})
        self.b = nn.ParameterDict({k: nn.Parameter(torch.zeros(shape(k, n, rank), device=device))
                                   for k, n in outs.items()})
        self.scale, self.generator = h.ttt_lora_alpha / rank, torch.Generator(device).manual_seed(h.seed)
        self.reset(fresh_a=True)
    @torch.no_grad()
    def reset(self, fresh_a: bool) -> None:
        """B <- 0 (each batch: the adapters start as the identity); fresh_a: new draws of A (the run's start and each
        new phase), else A is kept from the rank's previous batch (the record's warm start)."""
        for kind, b in self.b.items():
            b.zero_()
            if fresh_a:
                bound = self.a[kind].size(-1) ** -0.5
                self.a[kind].uniform_(-bound, bound, generator=self.generator)
    @contextlib.contextmanager
    def fresh(self):
        """Fresh adapters for one batch, then the kept A back (SPEC_0427 §12: the record gives a batch of another size
        a new LoRA and optimizer and leaves the reusable ones as they were)."""
        kept = [a.detach().clone() for a in self.a.values()]
        self.reset(fresh_a=True)
        yield
        for a, saved in zip(self.a.values(), kept):
            a.data.copy_(saved)
    def forward(self, slot: int, kind: str, x: Tensor) -> Tensor:
        return SlotLoRA({kind: (self.a[kind][slot], self.b[kind][slot])}, self.scale)(kind, x)
    def slots(self) -> List["SlotLoRA"]:
        """Every block call's adapters, by unbind: its backward stacks the slots' gradients once per tensor (indexing
        per slot would add a full-size gradient per slot: 17 x 178 MB per tensor at the record's size)."""
        rows = {kind: (self.a[kind].unbind(0), self.b[kind].unbind(0)) for kind in self.a if kind != "head"}
        return [SlotLoRA({kind: (a[slot], b[slot]) for kind, (a, b) in rows.items()}, self.scale)
                for slot in range(self.a["q"].size(0))]

class SlotLoRA(NamedTuple):
    """One block call's adapters {kind: (A, B)}: views, inputs of a compiled block (a tuple's tensors are; a plain
    object's would be constants: a graph per slot)."""
    adapters: Dict[str, Tuple[Tensor, Tensor]]
    scale: float
    def __call__(self, kind: str, x: Tensor) -> Tensor:
        """x (n, T, in) -> (n, T, out): the adapters of the last n rows (a step's rows whose documents go on)."""
        a, b = (p.narrow(0, p.size(0) - x.size(0), x.size(0)).to(x.dtype) for p in self.adapters[kind])
        return torch.bmm(torch.bmm(x, a.transpose(1, 2)), b.transpose(1, 2)) * self.scale

def lora_context(chunk_end: int, ctx: int) -> int:
    """A step's row length: its longest window rounded up to a power of 2 (>= 64, <= ctx): a few row lengths."""
    return min(ctx, max(64, 1 << (min(chunk_end, ctx) - 1).bit_length()))

def lora_step_rows(going_on: int, rows: int) -> int:
    """Rows a LoRA step computes: the last ones, from the first whose document goes on, a power of 2 >= 2 of them
    (1 row would compile its own graph), or all; the others would add only zeros (AdamW's beta1 is 0)."""
    return min(rows, max(2, 1 << (going_on - 1).bit_length()))

TTT_STEP_FLOOR_TOKENS = 32_768  # a LoRA step costs at least as much as this many row-tokens (its per-step overhead)

def lora_steps(h, lengths: Sequence[int]) -> List[Tuple[int, int]]:
    """(rows, row length) of each LoRA step lora_ttt_batch runs on a batch of documents with these target counts."""
    chunk, ctx, lengths = h.ttt_lora_chunk, h.effective_eval_seq_len, np.sort(lengths)
    return [(lora_step_rows(len(lengths) - int(np.searchsorted(lengths, step * chunk, side="right")), h.ttt_doc_batch),
             lora_context((step + 1) * chunk, ctx)) for step in range(ceil_div(int(lengths[-1]), chunk))]

def lora_shapes(h) -> List[Tuple[int, int]]:
    """Every (rows, row length) a LoRA step can have (lora_step_rows's, lora_context's), most rows first."""
    counts = sorted({lora_step_rows(n, h.ttt_doc_batch) for n in range(1, h.ttt_doc_batch + 1)}, reverse=True)
    ends = range(h.ttt_lora_chunk, h.effective_eval_seq_len + h.ttt_lora_chunk, h.ttt_lora_chunk)
    return [(n, t) for n in counts for t in sorted({lora_context(end, h.effective_eval_seq_len) for end in ends})]

def lora_batch_cost(h, lengths: Sequence[int]) -> int:
    """The schedule's cost model of a batch: row-tokens of its steps (lora_steps), each >= TTT_STEP_FLOOR_TOKENS."""
    return sum(max(TTT_STEP_FLOOR_TOKENS, rows * seq_len) for rows, seq_len in lora_steps(h, lengths))

def ttt_schedule(batch_docs: Sequence[int], costs: Sequence[float], boundaries: Sequence[int], world_size: int):
    """SPEC_0427 §10.3/§10.5 made deterministic: phase k after the queue batch that reaches boundary k and the W - 1
    after it (what the other ranks hold when the record's flag goes up: at 8 ranks its 1,296 / 2,128 / 2,960 scored
    documents), none with no batch left; between phases each batch to the rank whose batches cost least so far (the
    record's first free rank; ties: the lower). -> ([(batches scored before phase k, boundary k)], [segment][rank])."""
    counts, phases = np.cumsum(batch_docs), []
    for boundary in boundaries:
        end = min(len(batch_docs), int(np.searchsorted(counts, boundary)) + world_size)
        if boundary <= counts[-1] and end < len(batch_docs):
            phases.append((end, boundary))
    assignment, start = [], 0
    for end in [end for end, _ in phases] + [len(batch_docs)]:
        loads, ranks = [0.0] * world_size, [[] for _ in range(world_size)]
        for q in range(start, end):
            rank = min(range(world_size), key=loads.__getitem__)
            ranks[rank].append(q)
            loads[rank] += costs[q]
        assignment.append(ranks)
        start = end
    return phases, assignment

def lora_cuda_graphs(h, dist_info) -> bool:
    return h.ttt_cuda_graphs and dist_info.is_cuda and compile_enabled(h, dist_info)

def make_lora_nll(h, dist_info, model: GPT, lora: BatchedLoRA) -> Callable:
    """(x (rows, T), y (rows, C), picks (rows, C) positions of x) -> fp32 nll (rows, C) of the LoRA'd model; the
    hidden states are picked before the head, whose logits would not fit for every position. The RoPE tables are
    the first T rows of the EVAL_SEQ_LEN table (the same values: no NTK with phased TTT), passed in. Compiled: the
    block calls (a graph per kind of block) and the head, the glue eager (one graph of it all took ~150 s to compile
    cold, these ~30 s); row count and length marked dynamic: every step shares them (the record: dynamic=True)."""
    def head_nll(hidden: Tensor, y: Tensor, picks: Tensor) -> Tensor:
        hidden = hidden.gather(1, picks[..., None].expand(-1, -1, hidden.size(-1)))
        logits = model.logits_from_hidden(hidden, capped=False, lora=lora)  # the softcap in the autocast dtype (bf16),
        logits = model.logit_softcap * torch.tanh(logits / model.logit_softcap)  # as the record's (SPEC_0427 §12)
        return F.cross_entropy(logits.float().flatten(0, 1), y.flatten(), reduction="none").view_as(y)
    def dynamic(*tensors: Optional[Tensor]) -> None:  # rows and length (a RoPE table: its length)
        for tensor, dim in ((t, dim) for t in tensors if t is not None for dim in range(min(2, t.dim() - 1))):
            torch._dynamo.maybe_mark_dynamic(tensor, dim)
    head = head_nll
    if compile_enabled(h, dist_info):
        head, block = (torch.compile(fn, fullgraph=True) for fn in (head_nll, block_call))
        def dynamic_block(module, x, x0, weights, rope, value_embed, collector, slot, lane1, lambdas):
            x = x if x.requires_grad else x.detach().requires_grad_()  # the first block's too: no graph of its own
            dynamic(x, x0, lane1, value_embed, *rope[:2])
            return block(module, x, x0, weights, rope, value_embed, collector, slot, lane1, lambdas)
        model.lora_block = dynamic_block
    cos, sin, swap = model.rope_tables(h.effective_eval_seq_len, dist_info.device, model.tok_emb.weight.dtype)
    def call(x: Tensor, y: Tensor, picks: Tensor) -> Tensor:
        hidden = model.forward_hidden(x, lora=lora, rope=(cos[:x.size(1)], sin[:x.size(1)], swap))
        dynamic(hidden, y, picks)
        return head(hidden, y, picks)
    return call

class LoraStepper:
    """A LoRA step: the fp32 nll (rows, C) of its targets by the adapters as they are; then, training, one AdamW step
    on the scored ones' nll times their row's weight. A training step of a shape capture() recorded (a CUDA graph)
    replays it on copies of its inputs: 1 launch, not ~3,500 (CPU-bound); its nll, the graph's output, lives until
    the next step."""
    def __init__(self, h, dist_info, nll_fn: Callable, optimizer):
        self.dist_info, self.nll_fn, self.optimizer, self.graphs = dist_info, nll_fn, optimizer, {}
        self.pool = torch.cuda.graph_pool_handle() if lora_cuda_graphs(h, dist_info) else None  # the graphs' memory
    def __call__(self, x: Tensor, y: Tensor, picks: Tensor, scored: Tensor, weight: Tensor, train: bool) -> Tensor:
        if not train or tuple(x.shape) not in self.graphs:
            return self.run(x, y, picks, scored, weight, train)
        graph, inputs, nll = self.graphs[tuple(x.shape)]
        for static, value in zip(inputs, (x, y, picks, scored, weight)):
            static.copy_(value)
        graph.replay()
        return nll
    def run(self, x: Tensor, y: Tensor, picks: Tensor, scored: Tensor, weight: Tensor, train: bool = True) -> Tensor:
        with autocast_context(self.dist_info):
            nll = self.nll_fn(x, y, picks)
        if train:  # scored above; now trained on
            self.optimizer.zero_grad(set_to_none=True)
            (torch.where(scored, nll, 0.0) * weight[:, None]).sum().backward()
            self.optimizer.step()
        return nll.detach()
    def capture(self, *inputs: Tensor) -> None:  # the training step at these inputs' shape, after one ran (compiles)
        inputs = tuple(tensor.clone() for tensor in inputs)
        self.optimizer.zero_grad(set_to_none=True)  # the captured backward allocates the graph's own gradients
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):  # the graphs share one pool: they never run at once
            nll = self.run(*inputs)
        self.graphs[tuple(inputs[0].shape)] = (graph, inputs, nll)
    def reset(self) -> None:
        """A fresh AdamW state (zeros, step 0), in place: the captured steps read and write these very tensors."""
        for value in (value for state in self.optimizer.state.values() for value in state.values()):
            value.zero_()

def accumulate_scores(sums: Tensor, nll: Tensor, scored: Tensor, targets: Tensor, target_bytes: Tensor) -> None:
    """Adds the scored entries of nll (and their targets' bytes) to the fp64 [nll, targets, bytes] sums."""
    sums[0] += torch.where(scored, nll.double(), 0.0).sum()
    sums[1] += scored.sum()
    sums[2] += torch.where(scored, target_bytes[targets], 0).sum()

def lora_ttt_batch(h, lora: BatchedLoRA, stepper: LoraStepper, tokens: Tensor, target_bytes, spans: Tensor,
                   sums: Tensor) -> None:
    """One batch of documents (spans (rows, 2), CPU; empty rows pad it, first): step c scores targets [cC, (c+1)C) of
    each document, with up to EVAL_SEQ_LEN tokens of its own context, by a forward whose adapters trained on its
    earlier chunks only; then one AdamW step on the mean nll of those targets of every document with a later chunk.
    A step computes the last rows from the first whose document goes on (a power of 2 >= 2 of them, or all): the
    others would add only zeros to the scores and the gradients (AdamW's beta1 is 0)."""
    chunk, ctx, device, rows = h.ttt_lora_chunk, h.effective_eval_seq_len, tokens.device, spans.size(0)
    lengths_cpu = spans[:, 1] - spans[:, 0]
    longest, all_first, all_lengths = int(lengths_cpu.max()), spans[:, 0].to(device), lengths_cpu.to(device)
    offsets = torch.arange(chunk, device=device)
    lora.reset(fresh_a=False)
    stepper.reset()
    for step in range(ceil_div(longest, chunk)):
        lo = rows - lora_step_rows(rows - int((lengths_cpu > step * chunk).int().argmax()), rows)
        first, lengths = all_first[lo:], all_lengths[lo:]
        end = lengths.clamp(max=(step + 1) * chunk)  # per document: targets [step C, end) are new
        new, width = (end - step * chunk).clamp_min(0), end.clamp(max=ctx)
        window = first + end - width  # the row's first target: tokens [window, window + width) are its inputs
        seq_len = lora_context((step + 1) * chunk, ctx)
        positions = torch.arange(seq_len, device=device)
        x = torch.where(positions < width[:, None], tokens[(window[:, None] + positions) % tokens.numel()], 0)
        picks = (width[:, None] - chunk + offsets).clamp_min(0)
        scored, targets = offsets >= chunk - new[:, None], window[:, None] + picks
        weight = (end < lengths).float() / new.clamp_min(1)  # a document's last chunk: 0 (its batch's: no step)
        nll = stepper(x.long(), tokens[targets + 1].long(), picks, scored, weight, (step + 1) * chunk < longest)
        accumulate_scores(sums, nll, scored, targets, target_bytes)

def warm_up_lora_ttt(h, dist_info, model: GPT, lora: BatchedLoRA, stepper: LoraStepper, shapes) -> None:
    """On random tokens (no val data): the global SGD's forward + backward on a packed row of this rank's share of a
    chunk (gradients dropped: its kernels' first-use compiles and autotuning happen here, not in phase 1, where every
    rank would wait); a LoRA step (forward, backward, AdamW) at each (rows, row length) of `shapes` (the first compiles
    the dynamic graphs, the rest check that nothing else does), each then captured as a CUDA graph when the stepper
    records them; then restores the adapters' first draw and a fresh AdamW state."""
    generator, device = torch.Generator(dist_info.device).manual_seed(h.seed), dist_info.device
    seqs = min(h.ttt_batch_seqs, ceil_div(h.ttt_chunk_tokens // h.train_seq_len, dist_info.world_size))
    row = torch.randint(0, h.vocab_size, (1, seqs * h.train_seq_len + 1), device=device, generator=generator)
    cu_seqlens = document_cu_seqlens(row[0, :-1].cpu().numpy(), BOS_ID, h.train_seq_len, CU_SEQLENS_BUCKET)
    prepare_ttt_parameters(model.requires_grad_(True).train(), h.ttt_freeze_blocks)  # as global_sgd_phase's
    with autocast_context(dist_info):
        loss = model(row[:, :-1], row[:, 1:], torch.from_numpy(cu_seqlens).to(device))
    loss.backward()
    model.eval().requires_grad_(False).zero_grad(set_to_none=True)
    for n, seq_len in shapes:
        x, y = (torch.randint(0, h.vocab_size, (n, width), device=device, generator=generator)
                for width in (seq_len, h.ttt_lora_chunk))
        picks = (seq_len - h.ttt_lora_chunk + torch.arange(h.ttt_lora_chunk, device=device)).repeat(n, 1)
        inputs = (x, y, picks, picks >= 0, torch.full((n,), 1 / h.ttt_lora_chunk, device=device))  # all scored
        stepper.run(*inputs)  # contiguous inputs like the steps' (a compiled graph guards strides)
        if stepper.pool is not None:
            stepper.capture(*inputs)
    stepper.optimizer.zero_grad(set_to_none=True)
    stepper.reset()
    lora.generator.manual_seed(h.seed)
    lora.reset(fresh_a=True)

def phase_documents(order: Tensor, queue: List[Tensor], scored_batches: int, boundary: int) -> Tensor:
    """SPEC_0427 §10.5: the documents of the first `scored_batches` queue batches (every rank's, all scored now) in
    the record's order (batch of the ascending-length sort, then place in it: `order`), the first `boundary`."""
    return order[torch.isin(order, torch.cat(queue[:scored_batches]))][:boundary]

def global_sgd_phase(h, dist_info, model: GPT, tokens: Tensor, spans: Tensor, docs: Tensor) -> int:
    """SPEC_0427 §10.5: TTT_EPOCHS of SGD on the whole base model over the documents' tokens in this order (each with
    its final BOS), in TTT_CHUNK_TOKENS chunks (the record skips the last), lr cosine from TTT_LR; the base frozen
    after. -> tokens in the stream."""
    stream = torch.cat([tokens[first:end + 1] for first, end in spans[docs].tolist()])
    trainable, frozen_bank_rows, _ = prepare_ttt_parameters(model.requires_grad_(True), h.ttt_freeze_blocks)
    optimizer = torch.optim.SGD(trainable, lr=h.ttt_lr, momentum=h.ttt_momentum)
    num_chunks = ceil_div(stream.numel() - 1, h.ttt_chunk_tokens)
    for chunk in range(num_chunks - 1):
        for group in optimizer.param_groups:
            group["lr"] = h.ttt_lr * 0.5 * (1.0 + math.cos(math.pi * chunk / max(num_chunks - 1, 1)))
        begin = chunk * h.ttt_chunk_tokens
        train_on_chunk(h, dist_info, model, optimizer, trainable, frozen_bank_rows, stream, begin,
                       begin + h.ttt_chunk_tokens)
    model.requires_grad_(False).zero_grad(set_to_none=True)
    return stream.numel()

def phased_ttt_eval(h, dist_info, logger, model: GPT, tokens: Tensor, target_bytes, split: dict) -> tuple:
    """SPEC_0427 §10 on ttt_schedule's plan: each rank scores its queue batches, and all meet at each phase's SGD, then
    score on with fresh adapters. split gets the seconds of the warm-up (with the set-up) and of the loop."""
    started, spans = time.perf_counter(), document_spans(tokens)
    queue, order = ttt_queue(spans, h.ttt_doc_batch)
    lengths = [(spans[docs, 1] - spans[docs, 0]).numpy() for docs in queue]
    costs = [lora_batch_cost(h, n) for n in lengths]
    boundaries = [int(part) for part in h.ttt_phase_docs.split(",") if part.strip()]
    phases, assignment = ttt_schedule([docs.numel() for docs in queue], costs, boundaries, dist_info.world_size)
    logger.log(f"ttt_phased:start docs:{len(spans)} batches:{len(queue)} phases:{phases} "
               f"lora_rank:{h.ttt_lora_rank} chunk:{h.ttt_lora_chunk} context:{h.effective_eval_seq_len} "
               f"cuda_graphs:{int(lora_cuda_graphs(h, dist_info))}")
    model.requires_grad_(False).eval()
    lora = BatchedLoRA(h, sum(map(len, model.layer_orders[model.looping])), h.ttt_doc_batch, dist_info.device)
    optimizer = torch.optim.AdamW(lora.parameters(), lr=h.ttt_lora_lr, betas=(0.0, 0.99), eps=1e-10,
                                  weight_decay=h.ttt_lora_wd, fused=dist_info.is_cuda,  # 1 kernel a step, not ~200
                                  capturable=lora_cuda_graphs(h, dist_info))
    stepper = LoraStepper(h, dist_info, make_lora_nll(h, dist_info, model, lora), optimizer)
    if compile_enabled(h, dist_info):  # the shapes this rank's batches meet (its schedule is known), most rows first
        mine = {shape for ranks in assignment for q in ranks[dist_info.rank] for shape in lora_steps(h, lengths[q])}
        warm_up_lora_ttt(h, dist_info, model, lora, stepper, [shape for shape in lora_shapes(h) if shape in mine])
    sync_device(dist_info)
    loop_started, busy, sums = time.perf_counter(), 0.0, torch.zeros(3, dtype=torch.float64, device=dist_info.device)
    for segment, ranks in enumerate(assignment):
        for index, q in enumerate(ranks[dist_info.rank]):
            busy -= time.perf_counter()
            spans_q = F.pad(spans[queue[q]], (0, 0, h.ttt_doc_batch - queue[q].numel(), 0))  # ascending lengths
            with lora.fresh() if queue[q].numel() < h.ttt_doc_batch else contextlib.nullcontext():
                lora_ttt_batch(h, lora, stepper, tokens, target_bytes, spans_q, sums)
            sync_device(dist_info)
            busy += time.perf_counter()
            if dist_info.is_main and index % 50 == 0:
                logger.log(f"  ttt_phased:batch {q + 1}/{len(queue)} time:{time.perf_counter() - loop_started:.1f}s")
        if segment < len(phases):
            paused = time.perf_counter()
            barrier(dist_info)  # the wait: until every rank has scored its batches before the phase
            docs, gathered = phase_documents(order, queue, *phases[segment]), time.perf_counter()
            stream = global_sgd_phase(h, dist_info, model, tokens, spans, docs)
            lora.reset(fresh_a=True)
            logger.log(f"ttt_phased:phase after_batches:{phases[segment][0]} docs:{docs.numel()} sgd_tokens:{stream} "
                       f"paused_at:{paused - loop_started:.1f}s wait:{gathered - paused:.1f}s "
                       f"sgd_time:{time.perf_counter() - gathered:.1f}s")
    val_loss, val_bpb = reduced_loss_and_bpb(sums, dist_info)  # waits for every rank
    split.update(ttt_warmup=loop_started - started, ttt_loop=time.perf_counter() - loop_started)
    logger.log(f"ttt_phased:done compile:{split['ttt_warmup']:.1f}s loop:{split['ttt_loop']:.1f}s (the record's "
               f"total_eval_time: loop) scoring_s_by_rank:{[round(t, 1) for t in values_by_rank(busy, dist_info)]}")
    return val_loss, val_bpb

def timed_eval(dist_info, logger, label: str, evaluate: Callable, exact: bool, extra: str = "",
               split: Optional[dict] = None) -> tuple:
    """Runs evaluate() -> (val_loss, val_bpb), logs `<label> ... eval_time:<ms>ms` and, if exact, `<label>_exact`;
    split[label] gets the seconds."""
    sync_device(dist_info)
    started = time.perf_counter()
    val_loss, val_bpb = evaluate()
    sync_device(dist_info)
    elapsed_ms = 1000.0 * (time.perf_counter() - started)
    if split is not None:
        split[label] = elapsed_ms / 1000.0
    logger.log(f"{label} val_loss:{val_loss:.4f} val_bpb:{val_bpb:.4f} {extra}eval_time:{elapsed_ms:.0f}ms")
    if exact:
        logger.log(f"{label}_exact val_loss:{val_loss:.8f} val_bpb:{val_bpb:.8f}")
    return val_loss, val_bpb

# ==== 9. ARTIFACT ====
ARTIFACT_LIMIT_BYTES = 16_000_000  # decimal; counts code bytes + compressed model bytes
RAW_MODEL_FILENAME = "final_model.pt"
ARTIFACT_FILENAME = "final_model.int6.ptz"
PERGROUP_MAGIC = b"PGRP02"  # COMPRESSOR=pergroup's container, then its brotli part's length and a CRC-32 (4 B each)
HOT_GROUPS = ("tok_emb.weight.q", "attn.c_q.weight.q", "mlp.fc.weight.q")  # rows reordered where it pays (§9.2)
CONTEXT_CAP = 3  # pergroup: a value's context, the previous value v along the coded axis: clip(v) or min(|v|, CAP)
SHUFFLE_MAGIC = b"BSHF\x02"  # SPEC_0409 §7.6's byte shuffle: then the even-offset bytes, then the odd-offset ones
PASSTHROUGH_MAX_NUMEL = 65_536  # float tensors this small are stored fp16 (bigram.proj has exactly 65,536)
INT6_CLIP_QUANTILES = (0.9990, 0.9995, 0.9999, 0.99999, 1.0)  # GPTQ-lite candidates; 1.0 is the row max
# Bank -> the per-layer names its rows hold (SPEC §7.2): row part*num_layers + layer is blocks.<layer>.<part name>.
BANK_LAYOUT = {"qo_bank": ("attn.c_q.weight", "attn.proj.weight"), "kv_bank": ("attn.c_k.weight", "attn.c_v.weight"),
               "mlp_up_bank": ("mlp.fc.weight",), "mlp_down_bank": ("mlp.proj.weight",)}

class ArtifactTooLargeError(RunFailure):
    """Code + artifact bytes exceed ARTIFACT_LIMIT_BYTES while ARTIFACT_LIMIT_STRICT=1."""

def bank_row_names(bank_name: str, num_rows: int) -> List[str]:
    parts = BANK_LAYOUT[bank_name]
    return [f"blocks.{layer}.{part}" for part in parts for layer in range(num_rows // len(parts))]

def unbank_state_dict(state: dict) -> dict:
    """Banks -> one entry per layer matrix (views of the bank rows); every other entry unchanged."""
    flat = {}
    for name, tensor in state.items():
        flat.update(zip(bank_row_names(name, tensor.shape[0]), tensor) if name in BANK_LAYOUT else [(name, tensor)])
    return flat

def rebank_state_dict(flat: dict, banked_template: dict) -> dict:
    """Inverse of unbank_state_dict, with the keys (and key order) of `banked_template`."""
    return {name: torch.stack([flat[key] for key in bank_row_names(name, like.shape[0])])
            if name in BANK_LAYOUT else flat[name] for name, like in banked_template.items()}

def tensor_category(name: str) -> str:
    return ("embed" if "tok_emb" in name or "lm_head" in name else "mlp" if ".mlp." in name
            else "attn" if ".attn." in name or ".proj." in name else "other")

def quantization_plan(h: Hyperparameters, name: str, tensor: Tensor) -> tuple:
    """-> (kind, bits, clip sigmas): non-float or small: passthrough (fp16); rowclip (SPEC §7.4): mlp/attn int6, the
    rest int8; gptq (SPEC_0409 §7.3-§7.4, SPEC_0427 §8.2): the embed category at EMBED_BITS/_CLIP_SIGMAS, the rest
    at MATRIX_BITS and its category's k; ATTN_GATE_INT8: the sparse gate's rows int8 (clip sigmas 0: absmax)."""
    if h.attn_gate_int8 and name.endswith("attn_gate_w") and tensor.ndim == 2:
        return "int8", 8, 0.0
    if not tensor.is_floating_point() or tensor.numel() <= PASSTHROUGH_MAX_NUMEL:
        return "passthrough", 0, 0.0
    category = tensor_category(name)
    if h.quantizer == "rowclip":
        bits, clip_sigmas = (6 if category in ("mlp", "attn") else 8), 0.0
    elif category == "embed":
        bits, clip_sigmas = h.embed_bits, h.embed_clip_sigmas
    else:
        k = {"mlp": h.mlp_clip_sigmas, "attn": h.attn_clip_sigmas}.get(category, 0.0)
        bits, clip_sigmas = h.matrix_bits, k or h.matrix_clip_sigmas
    return f"int{bits}", bits, clip_sigmas

def weight_rows(weight: Tensor) -> Tensor:
    return weight.detach().float().reshape(weight.shape[0] if weight.ndim == 2 else 1, -1)  # a non-matrix: one row

def quantize_absmax(rows: Tensor, divisor: float, low: int, high: int) -> tuple:
    """-> (q int8, fp16 scale) per row: s = fp16(max|row| / divisor), q = clamp(round(row / s), low, high)."""
    scale = (rows.abs().amax(dim=1) / divisor).to(torch.float16)
    q = torch.clamp(torch.round(rows / torch.where(scale > 0, scale.float(), 1.0)[:, None]), low, high)
    return q.to(torch.int8), scale

def quantize_int6_rows(weight: Tensor) -> tuple:
    """GPTQ-lite (SPEC §7.5) -> (q int8 like weight, per-row fp16 scale): per clip quantile, q from the fp16 scale
    (so q*scale is what dequantizes); the first candidate with strictly lower whole-tensor MSE wins."""
    rows = weight_rows(weight)
    levels = torch.tensor(INT6_CLIP_QUANTILES, dtype=torch.float32, device=rows.device)
    best_error, best_q, best_scale = None, None, None
    for clip in torch.quantile(rows.abs(), levels, dim=1):  # (candidates, rows), linear interpolation
        scale = (clip / 31).clamp_min(1.0 / 31).to(torch.float16)  # the symmetric grid [-31, 31]
        scale_column = scale.float()[:, None]
        q = torch.clamp(torch.round(rows / scale_column), -31, 31)
        error = (rows - q * scale_column).square().mean()
        if best_error is None or error < best_error:
            best_error, best_q, best_scale = error, q, scale
    return best_q.to(torch.int8).reshape(weight.shape), best_scale

def quantize_int8_rows(weight: Tensor) -> tuple:
    """int8 (SPEC §7.6): clip rows at the 0.9999984 quantile of |W_r|; q uses the fp32 scale, stored as fp16."""
    rows = weight_rows(weight)
    clip = torch.quantile(rows.abs(), 0.9999984, dim=1)
    scale = (clip / 127).clamp_min(1.0 / 127)
    clipped = torch.maximum(torch.minimum(rows, clip[:, None]), -clip[:, None])
    q = torch.clamp(torch.round(clipped / scale[:, None]), -127, 127)
    return q.to(torch.int8).reshape(weight.shape), scale.to(torch.float16)

@contextlib.contextmanager
def fp32_matmul():
    """Full-precision fp32 GEMMs and factorizations inside (training allows TF32)."""
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(previous)

@fp32_matmul()
def gptq_quantize(weight: Tensor, hessian: Tensor, bits: int, clip_sigmas: float, block_size: int = 128) -> tuple:
    """Full-Hessian GPTQ with SDClip (SPEC_0409 §7.5) in fp32: weight (rows, cols), hessian (cols, cols) = sum X^T X
    -> (q int8, per-row fp16 scale); act order; error feedback column by column in a block, one GEMM after it."""
    levels, w = 2 ** (bits - 1) - 1, weight.detach().float().clone()
    scale = (clip_sigmas * w.std(dim=1) / levels).clamp_min(1e-10).to(torch.float16)
    # a row whose scale underflows fp16 to 0 dequantizes to 0 whatever q is: round it on a unit grid, not by 0/0
    sigma = torch.where(scale > 0, scale.float(), 1.0)
    hess = hessian.detach().to(device=w.device, dtype=torch.float32, copy=True)
    diag = hess.diagonal()
    dead = diag == 0  # an input that is always 0: its weights do nothing, so store 0
    diag[dead] = 1.0
    w[:, dead] = 0.0
    order = torch.argsort(diag, descending=True, stable=True)  # before damping: the same order, no rounding ties
    diag += 0.01 * diag.mean()  # damping: H + 0.01 mean(diag H) I is positive definite, its condition <= 100 cols
    hess = hess[order][:, order]
    # H^-1 = U^T U, U upper triangular: row j of U carries column j's rounding error (over U_jj) to later columns
    upper = torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(hess)), upper=True)
    columns = w.t()[order].contiguous()  # (cols, rows) in act order: each column one contiguous row
    q = torch.empty_like(columns)
    for start in range(0, columns.shape[0], block_size):
        end = start + block_size
        block, u = columns[start:end], upper[start:end, start:end]
        errors = torch.empty_like(block)
        for j in range(block.shape[0]):
            q[start + j] = torch.clamp(torch.round(block[j] / sigma), -levels, levels)
            errors[j] = (block[j] - q[start + j] * sigma) / u[j, j]
            block[j:].addr_(u[j, j:], errors[j], alpha=-1.0)
        columns[end:] -= upper[start:end, end:].t() @ errors  # the lazy update of every later block at once
    return q[torch.argsort(order)].t().to(torch.int8).contiguous(), scale

def quantize_state_dict(flat_state: dict, h: Optional[Hyperparameters] = None,
                        hessians: Optional[Dict[str, Tensor]] = None) -> tuple:
    """-> (tensors, meta) on CPU by h.quantizer (rowclip when h is None; gptq takes {name: input Hessian}). Every
    stored tensor is a fresh copy: a view of a bank row would make torch.save write the whole bank."""
    h, hessians, tensors, meta = h or Hyperparameters(), hessians or {}, {}, {}
    for name, tensor in flat_state.items():
        kind, bits, clip_sigmas = quantization_plan(h, name, tensor)
        if kind == "passthrough":
            dtype = torch.float16 if tensor.is_floating_point() else tensor.dtype
            tensors[name], meta[name] = tensor.detach().to(device="cpu", dtype=dtype, copy=True), kind
            continue
        if h.quantizer == "rowclip":
            q, scale = (quantize_int6_rows if kind == "int6" else quantize_int8_rows)(tensor)
        elif clip_sigmas == 0:  # the sparse gate (ATTN_GATE_INT8)
            q, scale = quantize_absmax(weight_rows(tensor), 127, -127, 127)
        elif name not in hessians:  # a matrix the calibration forward does not see (a wide bigram.proj)
            raise ValueError(f"QUANTIZER=gptq: no input Hessian for {name} (calibration collected {len(hessians)} "
                             "tensors)")
        elif not torch.isfinite(hessians[name]).all():  # the calibration forward overflowed
            raise ValueError(f"QUANTIZER=gptq: the Hessian of {name} has non-finite entries")
        else:
            q, scale = gptq_quantize(tensor, hessians[name], bits, clip_sigmas)
        tensors[name + ".q"], tensors[name + ".scale"], meta[name] = q.cpu(), scale.cpu(), {"type": kind}
    if h.lqer_rank > 0:
        add_lqer(h, flat_state, tensors, [name for name in meta if quantization_plan(h, name, flat_state[name])[2]])
    return tensors, meta

@fp32_matmul()
def add_lqer(h, flat_state: dict, tensors: dict, names: List[str]) -> None:
    """LQER (SPEC_0427 §8.3): the LQER_TOP_K of `names` with the largest ||E||_F, E = W - q s, get E ~ A B from the
    rank-LQER_RANK SVD: A = U S (rows, r) int2 in [-2, 1], one scale max|A|/1.5; B = V^T (r, cols) flattened, int4
    in [-8, 7], one scale max|g|/7.5 per group g of LQER_GROUP (the last one zero-padded); stored .lqA/.lqB(+s)."""
    def error(name):
        weight = flat_state[name].detach().float()
        return weight_rows(weight) - dequantize_rows(tensors, name).to(weight.device)
    norms = {name: float(error(name).norm()) for name in names}
    for name in sorted(names, key=lambda name: -norms[name])[:h.lqer_top_k]:
        u, sigma, vh = torch.linalg.svd(error(name), full_matrices=False)
        rank = min(h.lqer_rank, sigma.numel())
        b = F.pad(vh[:rank].reshape(-1), (0, -vh[:rank].numel() % h.lqer_group))
        for key, (q, scale) in (("lqA", quantize_absmax((u[:, :rank] * sigma[:rank]).reshape(1, -1), 1.5, -2, 1)),
                                ("lqB", quantize_absmax(b.reshape(-1, h.lqer_group), 7.5, -8, 7))):
            tensors[f"{name}.{key}"], tensors[f"{name}.{key}s"] = q.cpu(), scale.cpu()
        tensors[name + ".lqA"] = tensors[name + ".lqA"].reshape(-1, rank)

def dequantize_rows(tensors: dict, name: str) -> Tensor:
    """(rows, cols) fp32: q s, plus the LQER term (qA sA)(qB sB) where the artifact has one."""
    scale = tensors[name + ".scale"].float()
    rows = tensors[name + ".q"].float().reshape(scale.numel(), -1) * scale[:, None]
    if name + ".lqA" in tensors:
        a = tensors[name + ".lqA"].float() * tensors[name + ".lqAs"].float()
        b = (tensors[name + ".lqB"].float() * tensors[name + ".lqBs"].float()[:, None]).reshape(-1)
        rows = rows + a @ b[:a.shape[1] * rows.shape[1]].reshape(a.shape[1], rows.shape[1])
    return rows

def dequantize_state_dict(tensors: dict, meta: dict, template: dict) -> dict:
    """Artifact -> unbanked state with the shapes and dtypes of `template` (fp16 goes back to fp32/bf16)."""
    return {name: (dequantize_rows(tensors, name).reshape(like.shape) if isinstance(meta[name], dict)
                   else tensors[name]).to(like.dtype) for name, like in template.items()}

def ans_digest(tensors: dict, coded: list) -> str:
    """sha256 of the rANS-coded tensors' bytes: another constriction version could decode them differently."""
    return hashlib.sha256(b"".join(tensors[name].numpy().tobytes() for name in coded)).hexdigest()

def ans_model(counts: np.ndarray):
    """The rANS model of a value histogram (at least 2 bins: constriction refuses a 1-symbol alphabet)."""
    return constriction.stream.model.Categorical(counts / counts.sum(), perfect=False)

def serialize_artifact(tensors: dict, meta: dict, compressor: str, byte_shuffle: bool = False) -> bytes:
    """torch.save of {"w": tensors, "m": meta}, BYTE_SHUFFLE'd, then lzma or brotli; COMPRESSOR=pergroup first
    rANS-codes the 2-D .q tensors by group (encode_pergroup), their words after the brotli part."""
    payload = {"w": tensors, "m": meta}
    streams, buffer = encode_pergroup(payload) if compressor == "pergroup" else [], io.BytesIO()
    torch.save(payload, buffer)
    raw = buffer.getvalue()
    if byte_shuffle and len(raw) >= 2:
        raw = SHUFFLE_MAGIC + raw[0::2] + raw[1::2]
    if compressor == "lzma":
        return lzma.compress(raw, preset=6)
    blob = brotli.compress(raw, mode=brotli.MODE_GENERIC, quality=11, lgwin=22, lgblock=0)
    if compressor != "pergroup":
        return blob
    body = b"".join([blob, *streams])
    return b"".join([PERGROUP_MAGIC, len(blob).to_bytes(4, "little"), zlib.crc32(body).to_bytes(4, "little"), body])

def nearest_neighbour_order(matrix: np.ndarray) -> np.ndarray:
    """SPEC_0427 §9.2: from row 0, append the unused row of least L1 distance to the last one (ties: lowest index).
    All distances in one cdist (exact: sums of integers < 2^24 in fp32), then the chain, O(rows) a step."""
    rows = torch.from_numpy(matrix).to(device="cuda" if torch.cuda.is_available() else "cpu", dtype=torch.float32)
    distances, used, order = torch.cdist(rows[None], rows[None], p=1)[0].cpu().numpy(), np.zeros(len(rows)), [0]
    for _ in range(len(rows) - 1):
        used[order[-1]] = np.inf
        order.append(int(np.argmin(distances[order[-1]] + used)))
    return np.array(order)

def column_classes(stack: np.ndarray, bins: int, rounds: int = 6) -> list:
    """(layers, rows, cols) -> [((layers, cols) uint8 classes, their (k, bins) histograms)], k = 1, 2, 4, 8, 16: by
    quantile of mean |q| (equal counts), then `rounds` of moving each column to the class that codes it shortest."""
    columns, classes_by_k = stack.shape[0] * stack.shape[2], []
    index = np.arange(columns).reshape(stack.shape[0], 1, -1) * bins + stack - stack.min()
    histograms = np.bincount(index.ravel(), minlength=columns * bins).reshape(columns, bins).astype(np.float64)
    stat = np.abs(stack).mean(axis=1).ravel()
    for k in (1, 2, 4, 8, 16):
        classes = np.searchsorted(np.quantile(stat, np.linspace(0, 1, k + 1)[1:-1]), stat)
        for _ in range(rounds):
            counts = np.eye(k)[classes].T @ histograms + 0.5
            classes = np.argmax(histograms @ np.log2(counts / counts.sum(axis=1, keepdims=True)).T, axis=1)
        classes_by_k.append((classes.reshape(stack.shape[0], -1).astype(np.uint8),
                             (np.eye(k)[classes].T @ histograms).astype(np.int64)))
    return classes_by_k

def pergroup_context(v: np.ndarray, mode: int) -> np.ndarray:  # v: the value before, along the coded axis
    return CONTEXT_CAP + (np.clip(v, -CONTEXT_CAP, CONTEXT_CAP) if mode > 2 else np.minimum(abs(v), CONTEXT_CAP))

def pergroup_layout(stack: np.ndarray, mode: int, classes: Optional[np.ndarray]) -> tuple:
    """(layers, rows, cols) -> (values in coding order (steps, values per step), their contexts): mode 0 one step,
    the context the column's class (column_classes); modes 1/3 row by row, the context from the value above (the
    column's); 2/4 column by column; 1/2 from its magnitude, 3/4 from its value (pergroup_context)."""
    steps = stack.reshape(1, 1, -1) if mode == 0 else stack.transpose(0, 2, 1) if mode % 2 == 0 else stack
    steps = steps.transpose(1, 0, 2).reshape(steps.shape[1], -1)
    return steps, (np.broadcast_to(np.asarray(classes, np.int32)[:, None], stack.shape).reshape(1, -1) if mode == 0
                   else pergroup_context(np.concatenate([steps[:1] * 0, steps[:-1]]), mode))

def encode_pergroup(payload: dict) -> List[bytes]:
    """SPEC_0427 §9 with our coder for lrzip: the 2-D int8 .q tensors of one role and shape form a group (layer
    order), rANS-coded in the layout whose estimated size (entropy + ~2 B per table entry + side information) is
    least: mode 0 with 1-16 column classes, 1-4 of pergroup_layout, or for HOT_GROUPS 1/3 on rows in nearest-neighbour
    order; one stream per used context. payload["w"] keeps the rest; "g": per group (names, shape, low, mode, classes
    (mode 0) or None, counts, words, order or None)."""
    tensors, groups, streams, header = payload["w"], {}, [], []
    for name, tensor in tensors.items():
        if name.endswith(".q") and tensor.dtype == torch.int8 and tensor.ndim == 2:
            groups.setdefault((re.sub(r"^blocks\.\d+\.", "", name), tuple(tensor.shape)), []).append(name)
    for (role, shape), names in groups.items():
        stack = np.stack([tensors[name].numpy().astype(np.int32) for name in names])
        low, bins, best = int(stack.min()), max(int(stack.max() - stack.min()) + 1, 2), None
        chain = np.stack([nearest_neighbour_order(matrix) for matrix in stack]) if role in HOT_GROUPS else None
        for mode, classes, counts, order in ([(0, *pair, None) for pair in column_classes(stack, bins)]
                                             + [(mode, None, None, None) for mode in range(1, 5)]
                                             + [(1, None, None, chain), (3, None, None, chain)] * (chain is not None)):
            values = stack if order is None else np.take_along_axis(stack, order[:, :, None], axis=1)
            if mode:  # mode 0's counts come from the column histograms, without its layout
                steps, context = pergroup_layout(values, mode, classes)
                counts = np.bincount((context * bins + steps - low).ravel(), minlength=context.max() * bins + bins)
                counts = counts.reshape(-1, bins)
            p = counts / np.maximum(counts.sum(axis=1, keepdims=True), 1)
            size = (-(counts * np.log2(np.where(counts > 0, p, 1.0))).sum() / 8 + 2 * np.count_nonzero(counts)
                    + (0 if order is None else 2 * order.size)  # side information: the order, the classes
                    + (mode == 0) * stack[:, 0].size * math.log2(len(counts)) / 8)
            if best is None or size < best[0]:
                best = (size, mode, classes, order, values, counts)
        _, mode, classes, order, values, counts = best
        steps, context = pergroup_layout(values, mode, classes)
        words = []
        for c in np.flatnonzero(counts.sum(axis=1)):
            coder = constriction.stream.stack.AnsCoder()
            coder.encode_reverse(steps[context == c] - low, ans_model(counts[c]))
            streams.append(coder.get_compressed().astype("<u4").tobytes())
            words.append(len(streams[-1]) // 4)
        header.append((names, (len(names),) + shape, low, mode, None if classes is None else torch.from_numpy(classes),
                       torch.from_numpy(counts), words, None if order is None else
                       torch.from_numpy(order.astype(np.int16 if shape[0] <= 32768 else np.int32))))
    coded = [name for names, *_ in header for name in names]
    payload.update(w={name: t for name, t in tensors.items() if name not in coded}, g=header,
                   c=(importlib.metadata.version("constriction"), ans_digest(tensors, coded)))
    return streams

def decode_pergroup(payload: dict, words: np.ndarray, tensors: dict) -> Tuple[List[str], int]:
    """encode_pergroup's groups into `tensors`, step by step (contexts: the step before) -> (names, words used)."""
    position = 0
    for names, shape, low, mode, classes, counts, stream_words, order in payload["g"]:
        steps, first = pergroup_layout(np.zeros(shape, dtype=np.int32), mode, classes)
        coders = {}
        for c, count in zip(np.flatnonzero(counts.numpy().sum(axis=1)), stream_words):
            coders[c] = (constriction.stream.stack.AnsCoder(words[position:position + count]),
                         ans_model(counts[c].numpy()))
            position += count
        for step in range(steps.shape[0]):
            context = pergroup_context(steps[step - 1], mode) if step else first[0]
            for c, (coder, model) in coders.items():
                where = np.flatnonzero(context == c)
                steps[step, where] = coder.decode(model, where.size) + low
        layers, rows, cols = shape  # pergroup_layout inverted, then the rows' order
        values = (steps.reshape(shape) if mode == 0 else steps.reshape(rows, layers, cols).transpose(1, 0, 2)
                  if mode % 2 else steps.reshape(cols, layers, rows).transpose(1, 2, 0))
        for layer, name in enumerate(names):
            matrix = values[layer] if order is None else values[layer][np.argsort(order[layer].numpy())]
            tensors[name] = torch.from_numpy(matrix.astype(np.int8))
    return [name for names, *_ in payload["g"] for name in names], position

def deserialize_artifact(blob: bytes, name: str = "artifact") -> tuple:
    """-> (tensors, meta) of the artifact `name`, any COMPRESSOR or BYTE_SHUFFLE. The trainer reads back what it has
    just written; bench/compress.py reads any file it is given, so a damaged or foreign one is an error naming it."""
    if blob[:4] == PERGROUP_MAGIC[:4] and not blob.startswith(PERGROUP_MAGIC):  # PGRP01: another header
        raise DataError(f"{name}: a pergroup container of format {blob[:6]!r}; this trainer reads {PERGROUP_MAGIC!r}")
    if not blob.startswith(PERGROUP_MAGIC):
        payload = load_payload(blob, name, {"w", "m"})
        return payload["w"], payload["m"]
    if constriction is None:
        raise RunFailure("%s is a COMPRESSOR=pergroup artifact and this Python (%s) lacks the constriction module to "
                         "read it: pip install constriction" % (name, sys.executable))
    start = len(PERGROUP_MAGIC) + 8
    end = start + int.from_bytes(blob[len(PERGROUP_MAGIC):len(PERGROUP_MAGIC) + 4], "little")
    if blob[start - 4:start] != zlib.crc32(blob[start:]).to_bytes(4, "little"):
        raise DataError(f"{name}: its bytes do not match the CRC-32 written with them: truncated or altered")
    payload = load_payload(blob[start:end], name, {"w", "m", "c", "g"})
    tensors = dict(payload["w"])
    try:
        version, digest = payload["c"]
        words = np.frombuffer(blob[end:], dtype="<u4").astype(np.uint32)  # a native, writable copy
        coded, position = decode_pergroup(payload, words, tensors)
    except (ValueError, TypeError, RuntimeError, IndexError, KeyError) as exc:
        raise DataError(f"{name}: its rANS-coded tensors do not decode ({type(exc).__name__}: {exc})") from None
    if position != words.size:
        raise DataError(f"{name}: {words.size} rANS words where the tables account for {position}: damaged")
    if ans_digest(tensors, coded) != digest:
        raise DataError(f"{name}: the rANS-coded tensors decode to other values than were written (constriction "
                        f"{version} wrote them, this is {importlib.metadata.version('constriction')}): damaged, or "
                        "install that version")
    return tensors, payload["m"]

def load_payload(blob: bytes, name: str, keys: set) -> dict:
    """The checked {"w": tensors, "m": meta[, "c", "g"]} of a compressed (and maybe byte-shuffled) torch.save.
    weights_only=True: the unpickler builds only tensors and plain containers, so a crafted file cannot run code."""
    lzma_blob = blob.startswith(b"\xfd7zXZ\x00")  # a brotli stream with lgwin 22 starts with 0x?B, never 0xFD
    if not lzma_blob and brotli is None:
        raise RunFailure("%s is not lzma-compressed and this Python (%s) lacks the brotli module to read it: pip "
                         "install brotli" % (name, sys.executable))
    try:
        raw = lzma.decompress(blob) if lzma_blob else brotli.decompress(blob)
    except Exception as exc:  # lzma.LZMAError or brotli.error: not a (complete) stream of that compressor
        raise DataError("%s: %s (%s: %s)" % (name, "an xz (lzma) stream that does not decompress: damaged" if lzma_blob
                                             else "neither an xz (lzma) nor a brotli stream: not an artifact of "
                                             "this trainer, or damaged", type(exc).__name__, exc)) from None
    if raw.startswith(SHUFFLE_MAGIC):
        shuffled = raw[len(SHUFFLE_MAGIC):]
        raw, half = bytearray(len(shuffled)), (len(shuffled) + 1) // 2
        raw[0::2], raw[1::2] = shuffled[:half], shuffled[half:]
    try:
        payload = torch.load(io.BytesIO(raw), map_location="cpu", weights_only=True)
    except Exception as exc:  # a damaged zip, or a pickle of more than tensors and plain containers
        raise DataError(f"{name}: its torch.save part does not load ({type(exc).__name__}: {exc})"[:300]) from None
    if not (isinstance(payload, dict) and set(payload) == keys and isinstance(payload["m"], dict)
            and isinstance(payload["w"], dict) and all(isinstance(t, Tensor) for t in payload["w"].values())):
        raise DataError(f"{name}: expected a dict with exactly the keys {sorted(keys)}, 'w' mapping names to tensors")
    kinds = ["passthrough"] + [{"type": f"int{bits}"} for bits in range(2, 9)]
    stored = set(payload["w"]) | {key for group in payload.get("g", ()) for key in group[0]}
    for key, kind in payload["m"].items():
        if kind not in kinds or not ({key} if kind == "passthrough" else {key + ".q", key + ".scale"}) <= stored:
            raise DataError(f"{name}: entry {kind!r} of {key} is unknown or lacks its tensors")
    return payload

def account_submission_bytes(h, logger, raw_model_bytes: int, artifact_bytes: int, code_bytes: int) -> dict:
    """Code + model bytes against the decimal limit (SPEC §9 line 21): over it, an error line (and STRICT: raise)."""
    total, label, limit = artifact_bytes + code_bytes, "int6+" + h.compressor, ARTIFACT_LIMIT_BYTES
    for line in (f"Serialized model: {raw_model_bytes} bytes", f"Code size: {code_bytes} bytes",
                 f"Serialized model {label}: {artifact_bytes} bytes", f"Total submission size {label}: {total} bytes",
                 f"submission_bytes code_bytes:{code_bytes} model_bytes:{artifact_bytes} total_bytes:{total} "
                 f"limit_bytes:{limit} headroom_bytes:{limit - total}"):
        logger.log(line)
    if total > limit:
        logger.log(f"ERROR submission_over_limit total_bytes:{total} limit_bytes:{limit} over_by:{total - limit} "
                   f"strict:{h.artifact_limit_strict}")
        if h.artifact_limit_strict:
            raise ArtifactTooLargeError("the submission is %d bytes (code %d + model %d), %d over the %d-byte limit "
                                        "(ARTIFACT_LIMIT_STRICT=1)"
                                        % (total, code_bytes, artifact_bytes, total - limit, limit))
    return {"raw_model_bytes": raw_model_bytes, "code_bytes": code_bytes, "model_bytes": artifact_bytes,
            "total_bytes": total}

class HessianCollector(dict):
    """{unbanked name: sum of X^T X (fp32)} of the inputs of the matrices GPTQ quantizes; one term per looped pass."""
    def add(self, x: Tensor, *names: str) -> None:
        rows = x.detach().reshape(-1, x.size(-1)).float()
        gram = rows.T @ rows
        for name in names:
            self[name] = self[name] + gram if name in self else gram.clone()

@torch.no_grad()
def collect_hessians(h, logger, model: GPT, make_loader: Callable) -> Dict[str, Tensor]:
    """SPEC_0409 §7.2 on this rank's data: GPTQ_CALIBRATION_BATCHES fresh training batches through the eager model
    (eval mode, no autocast), H = sum of X^T X / batches in fp32; the tied head's input is the final norm's output.
    An embedding that is no head (a lookup, not a product) gets the identity: round to nearest on its grid."""
    logger.log("GPTQ:collecting Hessians from calibration data...")
    started, collector, was_training = time.perf_counter(), HessianCollector(), model.training
    model.eval()
    loader = make_loader()
    loader.clock.run(True)  # training data read on the training clock, from where training stopped (SPEC_0427 §0.4)
    try:
        with fp32_matmul():
            for _ in range(h.gptq_calibration_batches):
                x, _, *cu_seqlens = loader.next_batch()
                hidden = model.forward_hidden(x, collector, *cu_seqlens)
                collector.add(rms_norm(hidden), "tok_emb.weight" if model.lm_head is None else "lm_head.weight")
    finally:
        loader.close()  # its producer stops before the clock does
        loader.clock.run(False)
        model.train(was_training)
    hessians = {name: total / h.gptq_calibration_batches for name, total in collector.items()}
    for name, module in model.named_modules():
        if isinstance(module, nn.Embedding) and name + ".weight" not in hessians:
            hessians[name + ".weight"] = torch.eye(module.embedding_dim, device=module.weight.device)
    logger.log("GPTQ:collected %d Hessians in %.1fs" % (len(collector), time.perf_counter() - started))
    logger.log("train_data:last_read_ms:%.0f (GPTQ calibration included)" % loader.clock.last_read_ms)
    return hessians

def export_artifact(h, dist_info, logger, model: nn.Module, code_bytes: int, output_dir: str,
                    make_loader: Optional[Callable] = None) -> dict:
    """Rank 0 writes final_model.pt and the artifact (GPTQ from its own calibration batches, SPEC_0409 §0.8); then
    every rank accounts the bytes from the files, so a strict-limit failure raises on all ranks alike."""
    raw_path = os.path.join(output_dir, RAW_MODEL_FILENAME)
    artifact_path = os.path.join(output_dir, ARTIFACT_FILENAME)
    if dist_info.is_main:
        os.makedirs(output_dir, exist_ok=True)
        state = model.state_dict()
        torch.save(state, raw_path)
        hessians = collect_hessians(h, logger, model, make_loader) if h.quantizer == "gptq" else None
        started = time.perf_counter()
        tensors, meta = quantize_state_dict(unbank_state_dict(state), h, hessians)
        with open(artifact_path, "wb") as handle:
            handle.write(serialize_artifact(tensors, meta, h.compressor, h.byte_shuffle))
        logger.log(f"timing_quantize_ms:{1000.0 * (time.perf_counter() - started):.0f}")
    barrier(dist_info)
    return account_submission_bytes(h, logger, os.path.getsize(raw_path), os.path.getsize(artifact_path), code_bytes)

def load_artifact_model(artifact_path: str, make_model: Callable) -> nn.Module:
    """Reads the artifact into a fresh model from make_model() (the dtype recipe), loaded strictly."""
    with open(artifact_path, "rb") as handle:
        tensors, meta = deserialize_artifact(handle.read(), artifact_path)
    model = make_model()
    template = model.state_dict()
    flat = dequantize_state_dict(tensors, meta, unbank_state_dict(template))
    model.load_state_dict(rebank_state_dict(flat, template), strict=True)
    return model.eval()

# ==== 10. TRAINING LOOP ====
def run_micro_steps(dist_info: DistInfo, model: nn.Module, loader) -> Tensor:
    """GA forward/backward passes on this rank's micro-batches; returns the mean rank-local loss (device)."""
    steps, total = dist_info.grad_accum_steps, torch.zeros((), device=dist_info.device)
    for _ in range(steps):
        x, y, *cu_seqlens = loader.next_batch()  # cu_seqlens: TRAIN_LOADER=documents
        for entries in cu_seqlens:  # any number of segments: one compiled graph (not one per bucket of 64)
            torch._dynamo.mark_dynamic(entries, 0)
        with autocast_context(dist_info):
            loss = model(x, y, *cu_seqlens)
        (loss / steps).backward()
        total += loss.detach()
    return total / steps

def warmup_and_rewind(h: Hyperparameters, dist_info: DistInfo, logger: Logger, base_model: GPT, model: nn.Module,
                      optimizers: Optimizers, make_loader) -> None:
    """WARMUP_STEPS steps (base LRs, final momentum; as many looped ones with NUM_LOOPS > 0) compile off the clock,
    then model and optimizers are restored exactly; the caller's next loader restarts the data (SPEC §5, 0409 §5)."""
    if h.warmup_steps <= 0:
        return
    model_state = {k: v.detach().cpu().clone() for k, v in base_model.state_dict().items()}
    optimizer_states = [copy.deepcopy(optimizer.state_dict()) for optimizer in optimizers.all]
    with make_loader() as loader:
        for looping in (False, True) if h.num_loops > 0 else (False,):
            base_model.looping = looping
            if looping:
                logger.log("loop_warmup:enabled encoder:%s decoder:%s" % base_model.layer_orders[True])
            for k in range(1, h.warmup_steps + 1):
                run_micro_steps(dist_info, model, loader)
                optimizers.set_schedule(1.0, h.muon_momentum)
                optimizers.step()
                optimizers.zero_grad()
                if h.warmup_steps <= 20 or k % 10 == 0 or k == h.warmup_steps:
                    logger.log("%swarmup_step:%d/%d" % ("loop_" if looping else "", k, h.warmup_steps))
    base_model.looping = False
    base_model.load_state_dict(model_state)
    for optimizer, state in zip(optimizers.all, optimizer_states):
        optimizer.load_state_dict(state)

# A checkpoint, logs/<RUN_ID>/checkpoints/step_<N>/: model.pt (rank 0's weights, Adam states, EMA/SWA, looping and
# late-QAT switches), rank_<r>.pt (rank r's Muon momentum rows, loader state, RNG states) and manifest.json (step,
# train time, world size, resolved config, each file's sha256), written last in step_<N>.tmp, renamed whole.
RESUME_FREE_FIELDS = set("run_id resume checkpoint_every checkpoint_on_signal checkpoint_keep train_prefetch "
                         "train_prefetch_queue train_copy_stream val_prefetch val_prefetch_queue val_copy_stream "
                         "train_log_every val_loss_every final_eval".split())  # a resume may change these: not the math

def checkpoint_steps(root: str) -> List[int]:
    return sorted(int(name[5:]) for name in os.listdir(root) if re.fullmatch(r"step_\d+", name)) \
        if os.path.isdir(root) else []

def write_atomic(path: str, obj) -> None:
    """bytes, or torch.save of obj, into path + .tmp, synced, then renamed onto path."""
    with open(path + ".tmp", "wb") as handle:
        handle.write(obj) if isinstance(obj, bytes) else torch.save(obj, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(path + ".tmp", path)

def save_checkpoint(h, dist_info, base_model: GPT, optimizers: Optimizers, averages, loader, progress: dict) -> str:
    """progress: step, train_ms and stop_early (the wallclock cap's verdict) of the step just ended."""
    root = os.path.join("logs", h.run_id, "checkpoints")
    folder = os.path.join(root, "step_%d" % progress["step"])
    temp = folder + ".tmp"
    if dist_info.is_main:
        shutil.rmtree(temp, ignore_errors=True)  # a save that died half-way
        os.makedirs(temp)
    barrier(dist_info)
    rng = (random.getstate(), np.random.get_state(), torch.get_rng_state(),
           torch.cuda.get_rng_state(dist_info.device) if dist_info.is_cuda else None)
    write_atomic(os.path.join(temp, "rank_%d.pt" % dist_info.rank), dict(
        muon=[optimizers.muon.state[bank]["momentum"] for bank in optimizers.muon.banks], loader=loader.state_dict(),
        rng=rng))
    if dist_info.is_main:
        write_atomic(os.path.join(temp, "model.pt"), dict(
            model=base_model.state_dict(), adams=[adam.state_dict() for adam in optimizers.adams], ema=averages.ema,
            swa=(averages.swa_sum, averages.swa_count), looping=base_model.looping, qat=base_model.qat_enabled()))
    barrier(dist_info)  # every rank's file is in place
    if dist_info.is_main:
        files = {name: hashlib.sha256(read_checkpoint_file(os.path.join(temp, name))).hexdigest()
                 for name in sorted(os.listdir(temp))}
        write_atomic(os.path.join(temp, "manifest.json"), json.dumps(dict(
            progress, world_size=dist_info.world_size, files=files, config={f.name: getattr(h, f.name) for f in
                                                                           fields(h)}), indent=1).encode())
        shutil.rmtree(folder, ignore_errors=True)  # a run resumed from an older checkpoint saves this step again
        os.rename(temp, folder)
        for old in checkpoint_steps(root)[:-h.checkpoint_keep]:
            shutil.rmtree(os.path.join(root, "step_%d" % old))
    barrier(dist_info)
    return folder

def read_checkpoint_file(path: str, sha256: str = "") -> bytes:
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        raise CheckpointError("checkpoint file %s: %s" % (path, exc.strerror)) from None
    if sha256 and hashlib.sha256(data).hexdigest() != sha256:
        raise CheckpointError("checkpoint file %s (%d bytes): its sha256 is not manifest.json's: truncated or "
                              "corrupted" % (path, len(data)))
    return data

def resolve_resume(h: Hyperparameters, environ, world_size: int) -> Tuple[Hyperparameters, Optional[dict]]:
    """RESUME's manifest (+ folder), checked against this launch's settings and world size, and h with the
    checkpoint's RUN_ID; without RESUME: (h, None). RESUME=latest: RUN_ID's newest checkpoint."""
    if not h.resume:
        return h, None
    folder, root = h.resume, os.path.join("logs", h.run_id, "checkpoints")
    if folder == "latest" and ("RUN_ID" not in environ or not checkpoint_steps(root)):
        raise CheckpointError("RESUME=latest: no checkpoint in %s (it continues the run named by RUN_ID)" % root)
    folder = os.path.join(root, "step_%d" % checkpoint_steps(root)[-1]) if folder == "latest" else folder
    try:
        manifest = json.loads(read_checkpoint_file(os.path.join(folder, "manifest.json")))
        saved, world, _ = manifest["config"], manifest["world_size"], (manifest["step"], manifest["train_ms"])
    except (CheckpointError, ValueError, LookupError, TypeError) as exc:
        raise CheckpointError("RESUME=%s: not a complete checkpoint folder (%s)" % (h.resume, exc)) from None
    changed = ["%s=%r (checkpoint: %r)" % (f.name.upper(), getattr(h, f.name), saved.get(f.name)) for f in fields(h)
               if f.name not in RESUME_FREE_FIELDS and getattr(h, f.name) != saved.get(f.name)]
    for failed, message in [
            (environ.get("RUN_ID", saved["run_id"]) != saved["run_id"], "is run %s's checkpoint, not RUN_ID=%s's"
             % (saved["run_id"], h.run_id)),
            (world != world_size, "was written by %d ranks, this launch has WORLD_SIZE=%d: a resume keeps the world "
             "size (each rank's Muon rows and data order are its own)" % (world, world_size)),
            (changed, ": the settings differ from the checkpoint's run in %s: a resume must train the same way"
             % ", ".join(changed))]:
        if failed:
            raise CheckpointError("RESUME=%s%s%s" % (folder, "" if message[0] == ":" else " ", message))
    return replace(h, run_id=saved["run_id"]), dict(manifest, folder=folder)

def load_checkpoint(dist_info, checkpoint: dict, base_model: GPT, optimizers: Optimizers, averages):
    """Restores the weights, optimizer states, EMA/SWA, switches and RNG states (over the warm-up's restored state);
    returns this rank's loader state. Each file must have the manifest's sha256."""
    saved, mine = (torch.load(io.BytesIO(read_checkpoint_file(os.path.join(checkpoint["folder"], name), checkpoint[
        "files"].get(name, "missing"))), map_location=dist_info.device, weights_only=False)
                   for name in ("model.pt", "rank_%d.pt" % dist_info.rank))
    base_model.load_state_dict(saved["model"])
    for adam, state in zip(optimizers.adams, saved["adams"]):
        adam.load_state_dict(state)
    for bank, momentum in zip(optimizers.muon.banks, mine["muon"]):  # as saved: load_state_dict would cast bf16
        optimizers.muon.state[bank]["momentum"] = momentum
    base_model.looping, (swa_sum, averages.swa_count) = saved["looping"], saved["swa"]
    base_model.set_qat(saved["qat"])
    averages.ema, averages.swa_sum = saved["ema"], swa_sum and {k: t.cpu() for k, t in swa_sum.items()}  # CPU sum
    python_rng, numpy_rng, torch_rng, cuda_rng = mine["rng"]
    random.setstate(python_rng)
    np.random.set_state(numpy_rng)
    torch.set_rng_state(torch_rng.cpu())
    if cuda_rng is not None:
        torch.cuda.set_rng_state(cuda_rng.cpu(), dist_info.device)
    return mine["loader"]

def train(h: Hyperparameters, dist_info: DistInfo, logger: Logger, base_model: GPT, model: nn.Module,
          optimizers: Optimizers, val: ValidationData, make_loader, signals: StopSignal,
          checkpoint: Optional[dict]) -> WeightAverages:
    """The record's step loop (SPEC §5): validation at step 0 / every VAL_LOSS_EVERY / the end (off the clock),
    warmdown by wallclock, late QAT, EMA every step, SWA, and a MAX-reduced wallclock stop; checkpoints (off the
    clock) every CHECKPOINT_EVERY steps and, with CHECKPOINT_ON_SIGNAL, when any rank got SIGTERM/SIGINT."""
    averages = WeightAverages(h, base_model)
    loader_state = checkpoint and load_checkpoint(dist_info, checkpoint, base_model, optimizers, averages)
    train_ms, step, stop_early = (checkpoint["train_ms"], checkpoint["step"], checkpoint["stop_early"]) \
        if checkpoint else (0.0, 0, False)
    with make_loader(state=loader_state) as loader:
        if h.swa_enabled and h.ema_enabled:
            logger.log("swa:ignored SWA_ENABLED=1 with EMA_ENABLED=1: the EMA is applied, as in the record; "
                       "EMA_ENABLED=0 applies SWA")
        if checkpoint:
            logger.log("resume: step:%d/%d train_time:%.0fms from:%s" % (step, h.iterations, train_ms,
                                                                          checkpoint["folder"]))
        qat_on, signals.deferred, clock = base_model.qat_enabled(), h.checkpoint_on_signal, loader.clock
        sync_device(dist_info)
        clock.run(True)
        while True:
            last_step = step == h.iterations or stop_early
            if last_step or (h.val_loss_every > 0 and step % h.val_loss_every == 0):
                sync_device(dist_info)
                if last_step:  # no training read after the clock stops (SPEC_0427 §0.4): the producer ends first
                    loader.close()
                train_ms = clock.run(False)
                val_loss, val_bpb = plain_eval(h, dist_info, model, val)
                logger.log("step:%d/%d val_loss:%.4f val_bpb:%.4f train_time:%.0fms step_avg:%.2fms"
                           % (step, h.iterations, val_loss, val_bpb, train_ms, train_ms / max(step, 1)))
                sync_device(dist_info)
                clock.run(not last_step)
            if last_step:
                break
            elapsed_ms = clock.now_ms()
            scale, frac = lr_scale_at(h, step, elapsed_ms), training_fraction(h, step, elapsed_ms)
            if h.num_loops > 0 and not base_model.looping and frac >= h.enable_looping_at:
                base_model.looping = True  # for good: the later evals and the GPTQ calibration run looped
                logger.log("layer_loop:enabled step:%d frac:%.3f encoder:%s decoder:%s"
                           % ((step, frac) + base_model.layer_orders[True]))
            if not qat_on and h.late_qat_threshold > 0 and scale < h.late_qat_threshold:
                qat_on = True
                base_model.set_qat(True)
                logger.log("late_qat:enabled step:%d scale:%.4f" % (step, scale))
            train_loss = run_micro_steps(dist_info, model, loader)
            optimizers.set_schedule(scale, muon_momentum_at(h, step))
            if h.grad_clip_norm > 0 and h.grad_clip_scope == "local":  # the 03-23 record's (reduced: in the step)
                torch.nn.utils.clip_grad_norm_(base_model.parameters(), h.grad_clip_norm)
            optimizers.step()
            optimizers.zero_grad()
            averages.update_ema()
            step += 1
            approx_ms = clock.now_ms()
            if averages.maybe_accumulate_swa(step, scale):
                logger.log("swa:start step:%d" % step)
            if h.train_log_every > 0 and (step <= 10 or step % h.train_log_every == 0):
                all_reduce_(train_loss, dist_info, "avg")  # every rank logs the same step: the global batch loss
                logger.log("step:%d/%d train_loss:%.4f train_time:%.0fms step_avg:%.2fms"
                           % (step, h.iterations, train_loss.item(), approx_ms, approx_ms / step))
                loader.wait_ms()  # collects its events at a sync that happens anyway
            capped = h.train_budget_ms is not None and approx_ms >= h.train_budget_ms
            signals.where = "step:%d/%d train_time:%.0fms" % (step, h.iterations, approx_ms)
            verdict = torch.tensor([float(capped), float(signals.signum or 0)], device=dist_info.device)
            capped_anywhere, signum = all_reduce_(verdict, dist_info, "max").tolist()
            stop_early, signum = capped_anywhere > 0, int(signum)
            if signum or (h.checkpoint_every > 0 and step % h.checkpoint_every == 0):
                sync_device(dist_info)
                train_ms = clock.run(False)
                folder = save_checkpoint(h, dist_info, base_model, optimizers, averages, loader,
                                         dict(step=step, train_ms=train_ms, stop_early=stop_early))
                logger.log("checkpoint: step:%d/%d train_time:%.0fms path:%s" % (step, h.iterations, train_ms, folder))
                if signum:  # every rank stops at this step, whichever got the signal
                    raise RunStopped(signum, signals.where, folder)
                clock.run(True)
    signals.deferred, signals.where = False, "in the final evaluation, after step:%d/%d" % (step, h.iterations)
    if signals.signum:  # it came during the last validation
        raise RunStopped(signals.signum, signals.where)
    if stop_early and step < h.iterations:
        logger.log("stopping_early: wallclock_cap train_time:%.0fms step:%d/%d" % (train_ms, step, h.iterations))
    wait_ms = loader.wait_ms()  # host time blocked on the loader + the compute stream's waits for its copies
    logger.log("data_wait total_ms:%.1f per_step_ms:%.3f fraction_of_train_time:%.5f"
               % (wait_ms, wait_ms / max(step, 1), wait_ms / max(train_ms, 1e-9)))
    logger.log("train_data:last_read_ms:%.0f" % clock.last_read_ms)
    return averages

# ==== 11. MAIN ====
def manifest_tokenizer_sha256(data_path: str) -> Tuple[Optional[str], str]:
    """As data/manifest.py: (sha256 of the tokenizer that made the shards, where it is named), or (None, why not)."""
    path = os.path.join(data_path, "manifest.json")
    if not os.path.isfile(path):
        return None, "%s does not exist" % path
    try:
        with open(path, encoding="utf-8") as handle:
            manifest = json.load(handle)
        name = manifest["datasets"][0]["tokenizer_name"]
        sha256 = next(entry for entry in manifest["tokenizers"] if entry.get("name") == name)["sha256"]
    except (OSError, ValueError, LookupError, TypeError, AttributeError, StopIteration) as exc:
        return None, "%s names no tokenizer sha256 (%s: %s)" % (path, type(exc).__name__, exc)
    if not isinstance(sha256, str) or len(sha256) != 64:
        return None, "%s: tokenizer %r has no sha256" % (path, name)
    return sha256, "tokenizer %r of %s" % (name, path)

def dataset_manifest(data_path: str) -> Tuple[str, dict]:
    """(path, datasets[0]) of DATA_PATH's manifest.json; datasets[0] is {} when there is none to read."""
    path = os.path.join(data_path, "manifest.json")
    try:
        with open(path, encoding="utf-8") as handle:
            dataset = json.load(handle)["datasets"][0]
    except (OSError, ValueError, LookupError, TypeError):
        dataset = {}
    return path, dataset if isinstance(dataset, dict) else {}

def load_tokenizer(h: Hyperparameters, logger):
    """TOKENIZER_PATH's SentencePiece model, checked to be the one that made DATA_PATH's shards."""
    spm = optional_module("sentencepiece")
    if spm is None:
        raise RunFailure("this Python (%s) lacks the sentencepiece module the tokenizer needs: pip install "
                         "sentencepiece" % sys.executable)
    if not os.path.isfile(h.tokenizer_path):
        raise DataError("TOKENIZER_PATH=%s: no such file (build data first: see README)" % h.tokenizer_path)
    with open(h.tokenizer_path, "rb") as handle:
        actual = hashlib.sha256(handle.read()).hexdigest()
    expected, where = manifest_tokenizer_sha256(h.data_path)
    if expected is None:
        logger.log("WARNING tokenizer_identity: not checked: %s, so nothing says TOKENIZER_PATH=%s made DATA_PATH's "
                   "shards" % (where, h.tokenizer_path))
    elif actual != expected:
        message = ("TOKENIZER_PATH=%s (sha256 %s) is not the %s (sha256 %s) that made DATA_PATH's shards: their "
                   "val_bpb would be wrong" % (h.tokenizer_path, actual[:16], where, expected[:16]))
        if not h.allow_tokenizer_mismatch:
            raise DataError(message + "; ALLOW_TOKENIZER_MISMATCH=1 runs anyway")
        logger.log("WARNING tokenizer_identity: %s; running anyway (ALLOW_TOKENIZER_MISMATCH=1)" % message)
    else:
        logger.log("tokenizer_identity: sha256 %s... is the %s" % (actual[:16], where))
    try:
        sp = spm.SentencePieceProcessor(model_file=h.tokenizer_path)
    except (OSError, RuntimeError) as exc:
        raise DataError("TOKENIZER_PATH=%s: not a SentencePiece model (%s)" % (h.tokenizer_path, exc)) from None
    if sp.vocab_size() != h.vocab_size:
        raise DataError("VOCAB_SIZE=%d does not match the tokenizer %s (vocab %d)"
                        % (h.vocab_size, h.tokenizer_path, sp.vocab_size()))
    return sp

def run_final_evaluation(h, dist_info, logger, model: nn.Module, averages, val: ValidationData, code_bytes: int,
                         make_model: Callable, output_dir: str, make_loader: Optional[Callable] = None) -> dict:
    """SPEC §9 lines 19-24: average, post-average eval, artifact, then the reloaded artifact's round trip, sliding and
    legal TTT evals. make_model/make_loader: a fresh model / training loader (GPTQ calibration)."""
    tokens = device_tokens(val, dist_info.device)
    model.looping = h.num_loops > 0
    def plain(eval_model: nn.Module, hidden_forward: Callable, seq_len: int) -> Tuple[float, float]:
        loss_sum = scoring_loss_sum(eval_model, hidden_forward, h.eval_batch_seqs)
        return plain_eval(h, dist_info, eval_model, val, loss_sum, h.eval_batch_seqs, seq_len)
    results = {"average": apply_weight_average(logger, model, averages)}
    trained_forward = make_hidden_forward(h, dist_info, model)
    results["post_average"] = timed_eval(dist_info, logger, f"DIAGNOSTIC post_{results['average']}", exact=False,
                                         evaluate=lambda: plain(model, trained_forward, h.train_seq_len))
    results.update(export_artifact(h, dist_info, logger, model, code_bytes, output_dir, make_loader))
    sync_device(dist_info)
    eval_started = time.perf_counter()  # SPEC_0427 §0.5: the eval clock starts before deserialization
    eval_model = load_artifact_model(os.path.join(output_dir, ARTIFACT_FILENAME), make_model)
    eval_model.looping = model.looping
    eval_model.set_qat(model.qat_enabled())  # late QAT stays on into TTT training, as in the record
    eval_forward = make_hidden_forward(h, dist_info, eval_model)  # a new model of the same recipe reuses the code
    split = {"deserialize": time.perf_counter() - eval_started}  # seconds of each part of eval_time
    if h.roundtrip_eval:
        results["roundtrip"] = timed_eval(dist_info, logger, "final_int6_roundtrip", exact=True, split=split,
                                          evaluate=lambda: plain(eval_model, eval_forward, h.effective_eval_seq_len))
    record_stride = h.eval_stride != RECORD_EVAL_STRIDE and RECORD_EVAL_STRIDE <= h.effective_eval_seq_len
    for stride in ([h.eval_stride] + ([RECORD_EVAL_STRIDE] if record_stride else [])) * h.sliding_eval:
        label = "final_int6_sliding_window" + ("" if stride == h.eval_stride else f"_s{stride}")
        results[label] = timed_eval(  # the record's parsers want stride 64's line too
            dist_info, logger, label, exact=True, extra=f"stride:{stride} ", split=split, evaluate=lambda:
            sliding_window_eval(h, dist_info, eval_model, eval_forward, tokens, val.target_bytes, stride))
    if h.ttt_enabled and h.ttt_mode == "full":
        results["legal_ttt"] = timed_eval(dist_info, logger, "legal_ttt", exact=True, split=split, evaluate=lambda:
                                          ttt_eval(h, dist_info, logger, eval_model, eval_forward, tokens,
                                                   val.target_bytes))
    elif h.ttt_enabled:  # the record's key, then ours; split gets its warm-up and loop
        results["legal_ttt"] = timed_eval(dist_info, logger, "quantized_ttt_phased", exact=False,
                                          evaluate=lambda: phased_ttt_eval(h, dist_info, logger, eval_model, tokens,
                                                                           val.target_bytes, split))
        logger.log("legal_ttt_exact val_loss:%.8f val_bpb:%.8f" % results["legal_ttt"])
    sync_device(dist_info)
    total = time.perf_counter() - eval_started
    logger.log("eval_time:%.0fms (deserialization, every eval above, compile included)" % (1000.0 * total))
    split["other"] = total - sum(split.values())
    logger.log("eval_time_split " + " ".join("%s:%.0fms" % (part, 1000.0 * s) for part, s in split.items()))
    return results

def run(h: Hyperparameters, dist_info: DistInfo, logger: Logger, environ, signals: StopSignal,
        checkpoint: Optional[dict]) -> None:
    code = strip_source(read_own_source())  # the same text, sha256 and counted bytes from this file or its packed one
    counted = (lambda text: len(pack_source(text)) if brotli is not None else len(text.encode("utf-8")))
    code_bytes = counted(code)
    log_run_header(logger, h, code, code_bytes, environ, counted(read_own_source()))
    val = load_validation_data(h, load_tokenizer(h, logger), dist_info.device)
    logger.log("val_bpb:enabled tokenizer_kind=sentencepiece tokenizer_path=%s" % h.tokenizer_path)
    logger.log("train_loader:dataset:%s train_shards:%d" % (os.path.basename(os.path.normpath(h.data_path)),
                                                            len(list_shards(h.train_files, "train"))))
    logger.log("val_loader:shards pattern=%s tokens:%d" % (h.val_files, val.num_targets))
    logger.log("val_bytes:%d" % int(val.target_bytes.sum()))  # every bpb's denominator when all targets count
    kernels = select_kernels(h, dist_info)
    def make_model() -> GPT:
        fresh = build_model(h, dist_info.device)
        use_kernels(fresh, *(kernels[part][0] for part in ("attention", "qk", "mlp", "ce", "doc_attention")))
        return fresh
    clock = TrainingClock(checkpoint["train_ms"] if checkpoint else 0.0)  # a resumed run's: the time trained
    make_loader = functools.partial(make_train_loader, h, dist_info, logger, clock)
    base_model, compiled = make_model(), compile_enabled(h, dist_info)
    base_model.set_qat(h.qat_enabled)
    model = torch.compile(base_model, dynamic=False, fullgraph=True) if compiled else base_model
    for line in ["model_params:%d" % sum(p.numel() for p in base_model.parameters()),
            "XSA:last_%d active_layers:%s"
            % (h.xsa_last_n, [i for i, block in enumerate(base_model.blocks) if block.attn.use_xsa]),
            "world_size:%d grad_accum_steps:%d" % (dist_info.world_size, dist_info.grad_accum_steps),
            "attention_backend:%s (%s) torch_compile:%s" % (*kernels["attention"], compiled),
            "qk_kernel:%s (%s)" % kernels["qk"], "mlp_kernel:%s (%s)" % kernels["mlp"],
            "ce_kernel:%s (%s)" % kernels["ce"], "doc_attention_backend:%s (%s)%s" % (*kernels["doc_attention"], "" if
                not h.packed_rows else " packed_rows_qk_kernel:%s (per-token ops)" % kernels["qk"][0]),
            "attention_mode:gqa num_heads:%d num_kv_heads:%d" % (h.num_heads, h.num_kv_heads),
            "tie_embeddings:%s embed_lr:%s head_lr:%s matrix_lr:%s scalar_lr:%s"
            % (h.tie_embeddings, h.tied_embed_lr if h.tie_embeddings else h.embed_lr,
               h.head_lr if not h.tie_embeddings else 0.0, h.matrix_lr, h.scalar_lr),
            "train_batch_tokens:%d train_seq_len:%d iterations:%d warmup_steps:%d max_wallclock_seconds:%.3f"
            % (h.train_batch_tokens, h.train_seq_len, h.iterations, h.warmup_steps, h.max_wallclock_seconds),
            "seed:%d" % h.seed, "cpu_threads:%d omp_wait_policy:%s gomp_spincount:%s" % (torch.get_num_threads(),
                *(environ.get(name, "unset") for name in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")))]:
        logger.log(line)
    if h.gptq_reserve_seconds > 0 and h.train_budget_ms is not None:
        logger.log("gptq:reserving %.0fs, effective=%.0fms" % (h.gptq_reserve_seconds, h.train_budget_ms))
    optimizers = Optimizers(h, base_model, dist_info)
    warmup_and_rewind(h, dist_info, logger, base_model, model, optimizers, make_loader)
    averages = train(h, dist_info, logger, base_model, model, optimizers, val, make_loader, signals, checkpoint)
    if dist_info.is_cuda:
        logger.log("peak memory allocated: %d MiB reserved: %d MiB"
                   % (torch.cuda.max_memory_allocated() // 2 ** 20, torch.cuda.max_memory_reserved() // 2 ** 20))
    outputs = "log:" + logger.path
    if h.final_eval:
        run_final_evaluation(h, dist_info, logger, base_model, averages, val, code_bytes, make_model,
                             logger.output_dir, functools.partial(make_loader, order=h.gptq_calibration_loader))
        outputs += " model:%s artifact:%s" % tuple(os.path.join(logger.output_dir, name)
                                                   for name in (RAW_MODEL_FILENAME, ARTIFACT_FILENAME))
    for warning in suspicious_env_names(environ):  # again at the end: the start-up warning scrolls out of sight
        logger.log("WARNING unknown_env: " + warning)
    logger.log("outputs: " + outputs)

def failure_reason(exc: BaseException) -> str:
    if isinstance(exc, KeyboardInterrupt):  # RunStopped, or Ctrl-C before the handler is set
        return str(exc) if isinstance(exc, RunStopped) else "interrupted (SIGINT): the run stopped"
    return str(exc) if isinstance(exc, RunFailure) else "%s: %s" % (type(exc).__name__, exc)

def launch(environ, argv: List[str], world_size: int) -> int:
    """--help, or the run: settings, process group, log, training and evaluation."""
    if {"--help", "-h"} & set(argv):
        if environ.get("RANK", "0") == "0":
            print(settings_help())
        return 0
    if argv:
        raise RunFailure("unexpected argument %r: settings are environment variables (NUM_LAYERS=9 python "
                         "train_gpt.py); python train_gpt.py --help lists them" % argv[0], exit_code=2)
    h = Hyperparameters.from_env(environ)
    h.validate_for_world(world_size)
    h, checkpoint = resolve_resume(h, environ, world_size)
    dist_info = init_distributed(environ)
    logger, signals = Logger(dist_info, "logs", h.run_id, resume=checkpoint is not None), StopSignal()
    handlers = {signum: signal.signal(signum, signals) for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        run(h, dist_info, logger, environ, signals, checkpoint)
        barrier(dist_info)  # success only: a failing rank must exit at once so torchrun stops the others
    except BaseException as exc:  # the log ends with the reason too; main() tells the console
        logger.log(("" if isinstance(exc, RunStopped) else "error: ") + failure_reason(exc), console=False)
        raise
    finally:
        logger.close()
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
    if dist.is_initialized():
        dist.destroy_process_group()
    return 0

@record  # under torchrun, the traceback of an exception main() does not name becomes the job's root cause
def main() -> int:
    """A RunFailure ends in one `error:` line on stderr (and torchrun's error file), Ctrl-C in one line (exit 130), a
    bug in its traceback. torchrun reports the first failure it sees, so a rank whose failure may follow a peer's
    waits: ranks > 0 one grace (a config or data error hits every rank; rank 0 names it), other exceptions (what a
    dead peer causes) one more."""
    environ = dict(os.environ)
    rank, world_size = int(environ.get("RANK", "0")), int(environ.get("WORLD_SIZE", "1"))
    grace = 5.0 if world_size > 1 else 0.0  # torchrun polls its ranks every 0.1 s (5 s before torch 2.4)
    try:
        return launch(environ, sys.argv[1:], world_size)
    except RunFailure as failure:
        time.sleep(grace * (rank > 0))
        print("error: " + str(failure), file=sys.stderr, flush=True)
        if environ.get("TORCHELASTIC_ERROR_FILE"):  # torchrun's "Root Cause" instead of @record's traceback
            with open(environ["TORCHELASTIC_ERROR_FILE"], "w", encoding="utf-8") as handle:
                json.dump({"message": str(failure), "timestamp": int(time.time())}, handle)
        status = failure.exit_code
    except KeyboardInterrupt as interrupt:
        print(failure_reason(interrupt), file=sys.stderr, flush=True)
        status = getattr(interrupt, "exit_code", 130)
    except Exception:
        time.sleep(grace * (1 + (rank > 0)))
        raise
    if dist.is_initialized():  # nothing may print after the reason: skip the teardown, where a process group's
        sys.stdout.flush()     # destructor warns (or, after a peer died, can hang)
        os._exit(status)
    return status

if __name__ == "__main__":
    sys.exit(main())
