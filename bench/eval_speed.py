"""How long do the end-of-run evals of RECIPE=2026-04-27 take, and what does the phased LoRA TTT cost on the record's
8 GPUs? Three modes:

evals     a short RECIPE=2026-04-27 model (unless --artifact), then on its artifact the sliding-window eval, the
          full-model TTT (TTT_MODE=full at 04-09's lr 0.005, 3 epochs) and the phased LoRA TTT (TTT_PHASE_DOCS
          scaled to the val set as 2,500 of 50,000 documents), each timed from deserialization (compile included)
          on --nproc GPUs, with each rank's own scoring seconds.
warmup    one GPU, no data or artifact: seconds of the start-up kernel choice, build_model and warm_up_lora_ttt (and
          in it of the first LoRA step at each shape, the first one compiling, and of that step's capture; the
          compiles' seconds by phase); then
          the cost model of `estimate`: ms per LoRA step (forward + backward + AdamW) at each row length on
          TTT_DOC_BATCH rows ("lora_step_ms") and on each power of 2 >= 2 below ("lora_step_ms_rows_<n>": a step
          computes only the rows whose documents go on: every shape it can have), and per global-SGD forward +
          backward at world sizes 1, 2, 4, 8 (one rank's share of a TTT_CHUNK_TOKENS chunk); each the mean of
          --repeats after an untimed one.
estimate  (CPU) the phased TTT's loop time, its schedule simulated with that cost model for a val set (--val: our
          shards' documents; --record-logs: the record's FineWeb val set from its logs) at each world size: each
          queue batch's LoRA steps at their row lengths on the rows the trainer computes (costs interpolated between
          measured row counts), the batches given to ranks and the phases placed by the trainer's own ttt_schedule;
          at each phase every rank waits for the last, then all run the phase's SGD chunks.

  python3 bench/eval_speed.py evals [--nproc 2] [--parts train,sliding,full,phased] [--artifact A.ptz] [--out DIR]
  python3 bench/eval_speed.py warmup [--budget 280] [--repeats 5] [--json startup.json]
  python3 bench/eval_speed.py estimate --cost startup.json --val .carry/wiki_caseops --world 1,2,4
  python3 bench/eval_speed.py estimate --cost startup.json --record-logs ../shared/caseops/record_0427_seed*.log \\
      --world 8

evals: DATA_PATH, TOKENIZER_PATH (default .carry/wiki_caseops, .carry/caseops8192.model); ITERATIONS (default 600)
steps of TRAIN_BATCH_TOKENS (default 131072), no wallclock cap, COMPRESSOR=lzma (the artifact's size is not the
question). Artifact and rows stay under --out (default logs/ttt_bench_<nproc>): a later call (another part, or after
a time limit) reuses them and prints the whole table. warmup: RECIPE defaults to 2026-04-27; the seeded initial
model (timings do not depend on the weights). estimate: a cost file without fewer-row timings prices every step on
all rows; --record-logs reads the `ttp: bN/782 ... dl:MIN-MAX` lines of the record's rank-0 logs (213 of its 782
batches of 64 documents; the others' longest interpolated, lengths inside a batch in even steps of the logarithm),
its phases at 833/1,666/2,500 documents and SGD chunks 131/219/289 (its `tttg` lines, at 8 GPUs; used at every
world size). Not modelled: the SGD gradients' all-reduce, per-batch host work, any compile inside the loop (the
warm-up compiles before it)."""
import argparse, glob, json, math, os, re, sys, time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import REPO, ConsoleLogger, configure_kernels, load_trainer, run_trainer  # noqa: E402

RECORD_BATCHES, RECORD_DOCS, RECORD_PHASES = 782, 50_000, (833, 1666, 2500)
RECORD_SGD_CHUNKS = (131, 219, 289)  # the seed logs' `tttg: cK/N` counts per phase
MODES = {"sliding": {"TTT_ENABLED": "0"}, "full": {"TTT_MODE": "full", "TTT_LR": "0.005", "TTT_EPOCHS": "3"},
         "phased": {"TTT_MODE": "lora_phased"}}

def val_document_spans(tg, h):
    tokens = np.concatenate([tg.load_data_shard(p) for p in sorted(glob.glob(h.val_files))])
    return tg.document_spans(torch.from_numpy(tokens.astype(np.int64)))

def scaled_phase_docs(document_count: int) -> str:
    """The record's phase boundaries (833/1,666/2,500 of 50,000 scored documents) at this val set's size."""
    return ",".join(str(max(k + 1, round(document_count * b / RECORD_DOCS))) for k, b in enumerate(RECORD_PHASES))

# ==== evals ====
def base_env() -> dict:
    get = os.environ.get
    return dict(os.environ, RECIPE="2026-04-27", PYTHONUNBUFFERED="1", COMPRESSOR=get("COMPRESSOR", "lzma"),
                DATA_PATH=get("DATA_PATH", ".carry/wiki_caseops"),
                TOKENIZER_PATH=get("TOKENIZER_PATH", ".carry/caseops8192.model"), ITERATIONS=get("ITERATIONS", "600"),
                MAX_WALLCLOCK_SECONDS="0", VAL_LOSS_EVERY="0", TRAIN_BATCH_TOKENS=get("TRAIN_BATCH_TOKENS", "131072"))

def train_artifact(args, out: Path) -> Path:
    """The trainer with TTT off; its artifact (and the sliding-window score in its log)."""
    run_id = out.name + "_model"  # the trainer refuses an existing logs/<RUN_ID>/ folder
    artifact = REPO / "logs" / run_id / "final_model.int6.ptz"
    if artifact.is_file():
        return artifact
    started = time.perf_counter()
    status = run_trainer(["train_gpt.py"], dict(base_env(), TTT_ENABLED="0", RUN_ID=run_id), args.nproc,
                         out / "train.log")["returncode"]
    print(f"train: exit {status} in {time.perf_counter() - started:.0f}s; log {out / 'train.log'}", flush=True)
    if status != 0:
        sys.exit(open(out / "train.log").read()[-3000:])
    return artifact

def evaluate(args) -> None:
    """One eval under torchrun: everything from deserialization to the score, per rank; rank 0 prints a JSON row."""
    tg = load_trainer()
    env = dict(base_env(), **MODES[args.eval])
    if args.eval == "phased":
        env["TTT_PHASE_DOCS"] = scaled_phase_docs(len(val_document_spans(tg, tg.Hyperparameters.from_env(env))))
    h = tg.Hyperparameters.from_env(env)
    dist_info = tg.init_distributed(os.environ)
    logger = ConsoleLogger() if dist_info.is_main else type("Quiet", (), {"log": lambda self, *a, **k: None})()
    val = tg.load_validation_data(h, tg.load_tokenizer(h, logger), dist_info.device)
    tokens = tg.device_tokens(val, dist_info.device)
    # this rank's own seconds in each part of the phased eval (a rank that is done waits in a collective), printed
    # as each ends: the scoring of its batches, the warm-up and each phase's SGD (the trainer logs each wait)
    spent = {"lora_ttt_batch": [], "warm_up_lora_ttt": [], "global_sgd_phase": []}

    def timed(name, work):
        def run(*a):
            tg.sync_device(dist_info)
            begin = time.perf_counter()
            result = work(*a)
            tg.sync_device(dist_info)
            spent[name].append(time.perf_counter() - begin)
            if name != "lora_ttt_batch":
                print(f"rank {dist_info.rank}: {name} {spent[name][-1]:.1f}s at {time.perf_counter() - started:.1f}s",
                      flush=True)
            return result
        return run
    for name in spent:
        setattr(tg, name, timed(name, getattr(tg, name)))
    busy = spent["lora_ttt_batch"]
    tg.sync_device(dist_info)
    tg.barrier(dist_info)
    started = time.perf_counter()

    def make_model():
        model = tg.build_model(h, dist_info.device)
        configure_kernels(tg, h, dist_info, model)
        return model
    model = tg.load_artifact_model(args.artifact, make_model)
    model.looping = h.num_loops > 0
    loaded = time.perf_counter() - started
    if args.eval == "phased":
        loss, bpb = tg.phased_ttt_eval(h, dist_info, logger, model, tokens, val.target_bytes, {})
    elif args.eval == "sliding":
        forward = tg.make_hidden_forward(h, dist_info, model)
        loss, bpb = tg.sliding_window_eval(h, dist_info, model, forward, tokens, val.target_bytes, h.eval_stride)
    else:
        forward = tg.make_hidden_forward(h, dist_info, model)
        loss, bpb = tg.ttt_eval(h, dist_info, logger, model, forward, tokens, val.target_bytes)
    tg.sync_device(dist_info)
    mine = torch.tensor([time.perf_counter() - started, sum(busy), len(busy)], device=dist_info.device,
                        dtype=torch.float64)
    every = [torch.zeros_like(mine) for _ in range(dist_info.world_size)]
    if dist_info.distributed:
        torch.distributed.all_gather(every, mine)
    else:
        every = [mine]
    if dist_info.is_main:
        print("ROW " + json.dumps(dict(mode=args.eval, nproc=dist_info.world_size, val_loss=loss, val_bpb=bpb,
                                       eval_s=max(t[0].item() for t in every), deserialize_s=loaded,
                                       rank_busy_s=[round(t[1].item(), 1) for t in every],
                                       rank_batches=[int(t[2].item()) for t in every], targets=val.num_targets,
                                       phase_docs=env.get("TTT_PHASE_DOCS", ""))), flush=True)
    if dist_info.distributed:
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()

def print_evals_table(out: Path) -> None:
    rows = [json.loads(line) for line in open(out / "rows.jsonl")] if (out / "rows.jsonl").is_file() else []
    print("\n| eval | GPUs | val_bpb | eval s (from deserialization) | per-rank busy s (phased: own batches) |")
    print("|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['mode']} | {row['nproc']} | {row['val_bpb']:.5f} | {row['eval_s']:.1f} | "
              f"{row['rank_busy_s'] if row['mode'] == 'phased' else '-'} |")
    field = lambda line, key: float(line.split(key + ":")[1].split()[0].rstrip("s"))  # noqa: E731
    for row in [row for row in rows if row["mode"] == "phased"]:
        log = (out / "phased.log").read_text()
        compile_s = float(log.split("ttt_phased:done compile:")[1].split("s")[0])
        phases = [line for line in log.splitlines() if line.startswith("ttt_phased:phase")]
        print(f"\nphased, {row['nproc']} GPU(s): deserialize {row['deserialize_s']:.1f}s, compile warm-up "
              f"{compile_s:.1f}s, scoring (slowest rank) {max(row['rank_busy_s']):.1f}s for {row['targets']:,} "
              f"targets; phases (rank 0): " + ", ".join(
                  f"{field(p, 'sgd_tokens'):,.0f} SGD tokens in {field(p, 'sgd_time'):.1f}s after a "
                  f"{field(p, 'wait'):.1f}s wait" for p in phases))
    print("\nThe 8-GPU estimate of the phased loop: `python3 bench/eval_speed.py estimate` (warmup's cost model).")

def evals(args) -> None:
    if args.eval:
        return evaluate(args)
    out = Path(args.out or REPO / "logs" / f"ttt_bench_{args.nproc}")
    out.mkdir(parents=True, exist_ok=True)
    artifact = Path(args.artifact).resolve() if args.artifact else train_artifact(args, out)
    if not artifact.is_file():
        sys.exit(f"--artifact {artifact}: no such file")
    for part in [p for p in args.parts.split(",") if p in MODES]:
        status = run_trainer([Path(__file__).resolve(), "evals", "--eval", part, "--artifact", artifact], base_env(),
                             args.nproc, out / f"{part}.log")["returncode"]
        text = (out / f"{part}.log").read_text()
        rows = [line[4:] for line in text.splitlines() if line.startswith("ROW ")]
        print(f"{part}: exit {status} " + (rows[0] if rows else text[-3000:]), flush=True)
        if rows:
            with open(out / "rows.jsonl", "a") as handle:
                handle.write(rows[0] + "\n")
    print_evals_table(out)

# ==== warmup ====
def warmup(args) -> None:
    started = time.perf_counter()
    tg = load_trainer()
    h = tg.Hyperparameters.from_env(dict(os.environ, RECIPE=os.environ.get("RECIPE", "2026-04-27")))
    dist_info = tg.init_distributed({})
    result = {"device": torch.cuda.get_device_name(0) if dist_info.is_cuda else "CPU", "torch": torch.__version__,
              "recipe": h.recipe, "doc_batch": h.ttt_doc_batch, "seconds": {}, "lora_step_ms": {}, "sgd_ms": {}}
    def timed(work, repeats=1):
        tg.sync_device(dist_info)
        begin = time.perf_counter()
        for _ in range(repeats):
            work()
        tg.sync_device(dist_info)
        return (time.perf_counter() - begin) / repeats
    def report():
        result["peak_mib"] = torch.cuda.max_memory_allocated() // 2**20 if dist_info.is_cuda else None
        if args.json:
            Path(args.json).write_text(json.dumps(result, indent=1))
        print("\nRECIPE=%s on %s; total %.1f s" % (h.recipe, result["device"], time.perf_counter() - started))
    kernels, holder = {}, {}
    result["seconds"]["select_kernels"] = timed(lambda: kernels.update(tg.select_kernels(h, dist_info)))
    result["seconds"]["build_model"] = timed(lambda: holder.update(model=tg.build_model(h, dist_info.device)))
    model = holder["model"]
    tg.use_kernels(model, *(kernels[part][0] for part in ("attention", "qk", "mlp", "ce", "doc_attention")))
    model.looping = h.num_loops > 0
    model.requires_grad_(False).eval()
    lora = tg.BatchedLoRA(h, sum(map(len, model.layer_orders[model.looping])), h.ttt_doc_batch, dist_info.device)
    optimizer = torch.optim.AdamW(lora.parameters(), lr=h.ttt_lora_lr, betas=(0.0, 0.99), eps=1e-10,
                                  weight_decay=h.ttt_lora_wd, fused=dist_info.is_cuda,  # as phased_ttt_eval's
                                  capturable=tg.lora_cuda_graphs(h, dist_info))
    stepper = tg.LoraStepper(h, dist_info, tg.make_lora_nll(h, dist_info, model, lora), optimizer)
    shape_s = result["warm_up_shape_s"] = []  # the warm-up's first step at each shape, and its capture, timed
    for name in ("run", "capture"):  # (a capture runs the step too: untimed there, no synchronizing in a capture)
        setattr(stepper, name, lambda *a, _m=getattr(stepper, name), _n=name: _m(*a) if dist_info.is_cuda and
                torch.cuda.is_current_stream_capturing() else shape_s.append([_n, *a[0].shape, timed(lambda: _m(*a))]))
    result["seconds"]["warm_up_lora_ttt"] = timed(lambda: tg.warm_up_lora_ttt(h, dist_info, model, lora, stepper,
                                                                             tg.lora_shapes(h)))
    del stepper.run, stepper.capture
    print("warm-up: rows, row length, seconds of the first step there (the first: the compiles), of its capture")
    for rows, seq_len, first in ((r, t, s) for name, r, t, s in shape_s if name == "run"):
        print("%4d %6d %7.2f %7.2f" % (rows, seq_len, first, sum(s for name, r, t, s in shape_s
                                                                 if name == "capture" and (r, t) == (rows, seq_len))))
    for label, seconds in result["seconds"].items():
        print("%-32s %8.1f s" % (label, seconds), flush=True)
    names, values = torch._dynamo.utils.compile_times(repr="csv", aggregate=False)  # seconds per compile, by phase
    phases = {name: [float(v) for v in value.split(",") if v.strip()] for name, value in zip(names, values)}
    print("compile phases over 0.5 s (e.g. _compile.compile_inner: a Dynamo frame, its compile inside; nested)")
    for name, each in sorted(((n, e) for n, e in phases.items() if sum(e) >= 0.5), key=lambda item: -sum(item[1])):
        result.setdefault("compile_s", {})[name] = each
        print("  %-52s %6.1f  %s" % (name, sum(each), " ".join("%.1f" % s for s in each)), flush=True)
    chunk, device = h.ttt_lora_chunk, dist_info.device
    generator = torch.Generator(device).manual_seed(0)
    print("\nLoRA step: rows, row length, ms (a step computes the rows whose documents go on, a power of 2 of them)")
    for rows, seq_len in tg.lora_shapes(h):  # every shape a step can have
        x = torch.randint(0, h.vocab_size, (rows, seq_len), device=device, generator=generator)
        y = torch.randint(0, h.vocab_size, (rows, chunk), device=device, generator=generator)
        picks = (seq_len - chunk + torch.arange(chunk, device=device)).repeat(rows, 1)
        inputs = (x, y, picks, torch.ones_like(picks, dtype=torch.bool), torch.full((rows,), 1 / chunk, device=device))

        def step():  # a training step as the loop's (a replay of its CUDA graph where the warm-up captured one)
            stepper(*inputs, True)
        if time.perf_counter() - started > args.budget:
            return report()
        first = timed(step)
        ms = 1000 * timed(step, args.repeats)
        key = "lora_step_ms" if rows == h.ttt_doc_batch else "lora_step_ms_rows_%d" % rows
        result.setdefault(key, {})[seq_len] = ms
        print("%4d %6d %9.1f%s" % (rows, seq_len, ms, "  (recompiled: %.1f s)" % first
                                     if first > 10 * ms / 1000 + 1 else ""), flush=True)
    print("\nglobal SGD forward + backward (one rank's share of a %d-token chunk): world size, row tokens, ms, "
          "tokens/s per GPU" % h.ttt_chunk_tokens)
    for world in (1, 2, 4, 8):
        seqs = min(h.ttt_batch_seqs, tg.ceil_div(h.ttt_chunk_tokens // h.train_seq_len, world))
        row = torch.randint(0, h.vocab_size, (1, seqs * h.train_seq_len + 1), device=device, generator=generator)
        cu_seqlens = torch.from_numpy(tg.document_cu_seqlens(row[0, :-1].cpu().numpy(), tg.BOS_ID, h.train_seq_len,
                                                             tg.CU_SEQLENS_BUCKET)).to(device)
        tg.prepare_ttt_parameters(model.requires_grad_(True).train(), h.ttt_freeze_blocks)

        def sgd():
            with tg.autocast_context(dist_info):
                loss = model(row[:, :-1], row[:, 1:], cu_seqlens)
            loss.backward()
        if time.perf_counter() - started > args.budget:
            break
        first = timed(sgd)
        ms = 1000 * timed(sgd, args.repeats)
        result["sgd_ms"][world] = ms
        print("%6d %8d %9.1f %11.0f%s" % (world, row.numel() - 1, ms, (row.numel() - 1) / ms * 1000,
                                          "  (first: %.1f s)" % first if first > 10 * ms / 1000 + 1 else ""),
              flush=True)
        model.eval().requires_grad_(False).zero_grad(set_to_none=True)
    report()

# ==== estimate ====
def record_batches(paths: list) -> list:
    """Per queue batch (queue order: longest first) its documents' lengths, ascending, from the record's logs: a
    logged batch's from its MIN to its MAX, another's from the batch below's longest to its own longest (interpolated
    between logged batches), in even steps of the logarithm."""
    logged = {}
    for path in paths:
        for match in re.finditer(r"ttp: b(\d+)/%d .*?dl:(\d+)-(\d+)" % RECORD_BATCHES, Path(path).read_text()):
            logged[int(match.group(1))] = (int(match.group(2)), int(match.group(3)))
    if len(logged) < 2:
        sys.exit(f"--record-logs {paths}: fewer than 2 `ttp: bN/{RECORD_BATCHES} ... dl:MIN-MAX` lines")
    known = sorted(logged)
    longest = np.exp(np.interp(np.arange(1, RECORD_BATCHES + 1), known, np.log([logged[b][1] for b in known])))
    docs = [64] * (RECORD_BATCHES - 1) + [RECORD_DOCS - 64 * (RECORD_BATCHES - 1)]  # the longest batch holds the rest
    batches = []
    for b in range(RECORD_BATCHES, 0, -1):
        low, high = logged[b] if b in logged else (longest[b - 2] if b > 1 else 1, longest[b - 1])
        batches.append(sorted(int(round(n)) for n in np.geomspace(max(low, 1), high, docs[b - 1])))
    return batches

def val_batches(tg, h) -> tuple:
    """Per queue batch of the val shards its documents' lengths (ascending), `h`'s boundaries, and a function of the
    phases (the trainer's ttt_schedule's) that gives each phase's SGD chunks: its documents (phase_documents), each
    with its final BOS, in TTT_CHUNK_TOKENS chunks, the last one not trained."""
    spans = val_document_spans(tg, h)
    lengths = spans[:, 1] - spans[:, 0]
    queue, order = tg.ttt_queue(spans, h.ttt_doc_batch)
    batches = [sorted(lengths[docs].tolist()) for docs in queue]
    boundaries = [int(part) for part in h.ttt_phase_docs.split(",") if part.strip()]

    def chunks(phases):
        docs = [tg.phase_documents(order, queue, end, boundary) for end, boundary in phases]
        return [max(math.ceil(int((lengths[d] + 1).sum() - 1) / h.ttt_chunk_tokens) - 1, 0) for d in docs]
    return batches, boundaries, chunks

def step_ms(cost: dict, rows: int):
    """ms of a LoRA step of `rows` rows at a row length: TTT_DOC_BATCH rows' measured cost ("lora_step_ms"), or
    interpolated in the number of rows between the measured counts ("lora_step_ms_rows_<n>")."""
    full = {int(k): v for k, v in cost["lora_step_ms"].items()}
    measured = {cost["doc_batch"]: full} | {int(key.rsplit("_", 1)[1]): {int(k): v for k, v in table.items()}
                                           for key, table in cost.items() if key.startswith("lora_step_ms_rows_")}
    counts = sorted(measured)
    return lambda length: float(np.interp(rows, counts, [measured[n][length] for n in counts]))

def simulate(tg, h, batches, boundaries, sgd_chunks, cost, world) -> dict:
    """The loop at `world` ranks: the trainer's ttt_schedule (its phases, and its batches per rank between phases by
    its own cost model) timed with the measured one; every rank waits at each phase for the slowest, then the SGD."""
    sgd_ms = {int(k): v for k, v in cost["sgd_ms"].items()}
    if world not in sgd_ms:
        sys.exit(f"--cost: no SGD step time for world size {world} (measured: {sorted(sgd_ms)})")
    full = h.ttt_doc_batch
    compacted = any(key.startswith("lora_step_ms_rows_") for key in cost)
    costs = {rows: step_ms(cost, rows) for rows in range(1, full + 1)}

    def batch_seconds(lengths: list) -> float:  # the trainer's steps (rows, row length)
        return sum(costs[rows if compacted else full](seq_len) for rows, seq_len in tg.lora_steps(h, lengths)) / 1e3
    phases, assignment = tg.ttt_schedule([len(b) for b in batches], [tg.lora_batch_cost(h, b) for b in batches],
                                         boundaries, world)
    chunks = sgd_chunks(phases)
    seconds = [batch_seconds(lengths) for lengths in batches]
    shapes = [len({s for ranks in assignment for q in ranks[rank] for s in tg.lora_steps(h, batches[q])})
              for rank in range(world)]  # the step shapes each rank meets (what its warm-up runs)
    busy, loop_s, sgd_total = [0.0] * world, 0.0, 0.0
    for segment, ranks in enumerate(assignment):
        loads = [sum(seconds[q] for q in batches_of_rank) for batches_of_rank in ranks]
        busy = [b + load for b, load in zip(busy, loads)]
        loop_s += max(loads)
        if segment < len(phases):
            sgd_total += chunks[segment] * sgd_ms[world] / 1e3
    return dict(world=world, loop_s=loop_s + sgd_total, rank_busy_s=[round(b, 1) for b in busy], sgd_s=sgd_total,
                phases=phases, batches=len(batches), longest_batch_s=max(seconds), total_gpu_s=sum(busy),
                compacted=compacted, shapes=shapes)

def estimate(args) -> None:
    cost = json.loads(Path(args.cost).read_text())
    tg = load_trainer()
    env = {"RECIPE": "2026-04-27", "DATA_PATH": args.val or ".", "VOCAB_SIZE": "8192"}
    if args.val:
        h = tg.Hyperparameters.from_env(env)
        if args.phases is None:
            args.phases = scaled_phase_docs(len(val_document_spans(tg, h)))
        h = tg.Hyperparameters.from_env(dict(env, TTT_PHASE_DOCS=args.phases))
        batches, boundaries, chunks = val_batches(tg, h)
        what = f"{args.val}'s val documents, phases at {args.phases} documents"
    else:
        h = tg.Hyperparameters.from_env(env)
        batches, boundaries = record_batches(args.record_logs), list(RECORD_PHASES)
        chunks = lambda phases: list(RECORD_SGD_CHUNKS)  # noqa: E731 (its logs' counts, at 8 GPUs)
        what = "the record's val set (782 batches from its logs), phases at 833/1666/2500 documents"
    print(f"cost model: {cost['device']} ({cost['torch']}), LoRA ms by row length {cost['lora_step_ms']}, "
          f"SGD ms by world size {cost['sgd_ms']}\n{what}; longest document {batches[0][-1]:,} tokens; rows per step: "
          + ("the trainer's (the last from the first whose document goes on), costs interpolated between the measured "
             "row counts" if any(k.startswith("lora_step_ms_rows_") for k in cost) else
             "all (the cost file has no fewer-row timings; the trainer computed every row then)") + "\n")
    print("| world | phases (batches scored before, boundary) | predicted loop s | longest batch s | SGD s | "
          "scoring GPU-s | per-rank scoring s | per-rank step shapes |")
    print("|---|---|---:|---:|---:|---:|---|---|")
    for world in [int(w) for w in args.world.split(",") if w.strip()]:
        row = simulate(tg, h, batches, boundaries, chunks, cost, world)
        print(f"| {world} | {row['phases']} | {row['loop_s']:.1f} | {row['longest_batch_s']:.1f} | "
              f"{row['sgd_s']:.1f} | {row['total_gpu_s']:.1f} | {row['rank_busy_s'] if world <= 8 else '...'} | "
              f"{row['shapes'] if world <= 8 else '...'} |")

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    modes = parser.add_subparsers(dest="mode", required=True)
    run = modes.add_parser("evals", help="each eval of an artifact, timed on --nproc GPUs")
    run.add_argument("--nproc", type=int, default=1)
    run.add_argument("--parts", default="train,sliding,full,phased")
    run.add_argument("--out", default="")
    run.add_argument("--eval", choices=sorted(MODES), help=argparse.SUPPRESS)  # one eval, under torchrun
    run.add_argument("--artifact", help="evaluate this artifact (a RECIPE=2026-04-27 model) instead of training")
    warm = modes.add_parser("warmup", help="the phased TTT's warm-up and its cost model, one GPU")
    warm.add_argument("--budget", type=float, default=280.0)
    warm.add_argument("--repeats", type=int, default=5)
    warm.add_argument("--json", help="also write the measurements here (the cost model of `estimate`)")
    sim = modes.add_parser("estimate", help="the phased TTT's loop time from the cost model (CPU)")
    sim.add_argument("--cost", required=True, help="`warmup --json` output")
    source = sim.add_mutually_exclusive_group(required=True)
    source.add_argument("--val", help="a DATA_PATH whose val shards give the documents")
    source.add_argument("--record-logs", nargs="+", help="the 2026-04-27 record's seed logs")
    sim.add_argument("--world", default="1,2,4,8", help="world sizes, comma-separated")
    sim.add_argument("--phases", help="TTT_PHASE_DOCS for --val (default: scaled from the record's)")
    args = parser.parse_args()
    {"evals": evals, "warmup": warmup, "estimate": estimate}[args.mode](args)

if __name__ == "__main__":
    main()
