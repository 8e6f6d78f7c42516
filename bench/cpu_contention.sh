#!/usr/bin/env bash
# ms/step of ./run.sh's tiny preset per commit, tree or setting, alone and beside one CPU-bound process (a shell busy
# loop), paired and interleaved, so that a per-step regression between two commits shows in one command:
#   bash bench/cpu_contention.sh [-r ROUNDS (3)] [-m MODES (alone,busy)] [SPEC (.) ...]      e.g. -m alone b486f58 .
# SPEC: a git revision (archived) or a directory (`.`: this checkout as it is), then optionally `:KEY=VALUE,...` for
# its runs only (`.:OMP_WAIT_POLICY=ACTIVE`). A round runs each SPEC per mode, reversing the order each round. A run:
# ITERATIONS=12 VAL_LOSS_EVERY=0 TTT_ENABLED=0 FINAL_EVAL=0 TRAIN_LOG_EVERY=1 (exported settings win) PRESET=tiny
# ./run.sh. Per run: ms/step (median of its steps), wall s, 1-min load at its start, `others`: other processes' CPU
# during it in cores (the busy loop's ~1.0 counts). Per SPEC and mode: medians, ratio to the first SPEC, busy/alone,
# whether its step losses are the first SPEC's (the same math). KEEP=1 keeps the runs' consoles.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
source "$here/tools/python_env.sh"  # one interpreter for every tree (an archive has no .venv of its own)
exec "$PYTHON" - "$here" "$@" <<'EOF'
import atexit, getopt, glob, os, re, resource, shutil, statistics as st, subprocess as sp, sys, tempfile, time
opts, specs = getopt.getopt(sys.argv[2:], "r:m:")
here, opts, specs, busy = sys.argv[1], dict(opts), specs or ["."], None
modes, work, trees, names = opts.get("-m", "alone,busy").split(","), tempfile.mkdtemp(prefix="cpu_cont."), [], []
atexit.register(lambda: (busy and busy.kill(), shutil.rmtree(work, ignore_errors=True)))
for i, target in enumerate(spec.split(":")[0] for spec in specs):  # one tree each, its sample built before the runs
    tree, git = os.path.isdir(target), ["git", "-C", target if os.path.isdir(target) else here]
    names.append(sp.run(git + (["describe", "--always", "--dirty"] if tree else ["rev-parse", "--short", target +
                 "^{commit}"]), capture_output=True, text=True, check=not tree).stdout.strip() or target)
    trees.append(os.path.abspath(target) if tree else os.path.join(work, str(i)))
    if not tree:
        os.makedirs(trees[i]), sp.run(" ".join(git + ["archive", names[i], "| tar -xC", trees[i]]), shell=True, check=1)
    if not glob.glob(trees[i] + "/data/datasets/fineweb10B_sp1024/fineweb_val_*.bin"):
        sp.run([sys.executable, "data/build_shards.py", "--vocab-size", "1024"], cwd=trees[i], stdout=sp.DEVNULL)
env = dict(dict(ITERATIONS="12", VAL_LOSS_EVERY="0", TTT_ENABLED="0", FINAL_EVAL="0", TRAIN_LOG_EVERY="1"),
           **dict(os.environ, PRESET="tiny"))  # PYTHON: tools/python_env.sh exported it
cpu = lambda: (lambda f: (sum(f) - f[3] - f[4]) / os.sysconf("SC_CLK_TCK"))(
    [int(x) for x in open("/proc/stat").readline().split()[1:9]])  # all processes' busy CPU seconds
own = lambda: (lambda u: u.ru_utime + u.ru_stime)(resource.getrusage(resource.RUSAGE_CHILDREN))
runs, order, row = [], list(range(len(specs))), "%-5s %-30s %-5s %8s %7s %5s %6s %4s"
print(row % ("round", "spec", "mode", "ms/step", "wall_s", "load", "others", "exit"), flush=True)
for rnd in range(1, int(opts.get("-r", 3)) + 1):
    for mode in modes:
        busy = sp.Popen(["bash", "-c", "while :; do :; done"]) if mode == "busy" else None
        for i in order:
            out, settings = os.path.join(work, "%d_%s_%d.txt" % (rnd, mode, i)), specs[i].partition(":")[2]
            load, t0, c0, o0 = open("/proc/loadavg").read().split()[0], time.perf_counter(), cpu(), own()
            status = sp.call("./run.sh", cwd=trees[i], stdout=open(out, "w"), stderr=sp.STDOUT, env=dict(env, RUN_ID=
                "%s_%d%s%d" % (os.path.basename(work), rnd, mode, i), **dict(kv.split("=", 1) for kv in
                                                                            settings.split(",") if kv)))
            wall, steps, losses, last = time.perf_counter() - t0, [], [], (0, 0)
            for m in re.finditer(r"step:(\d+)/\d+ (?:train_loss:(\S+)|val_loss.*) train_time:(\d+)ms",
                                 open(out).read()):
                losses += [m[2]] * bool(m[2])
                if int(m[1]) > last[0]:  # train_time is whole ms: a step's time is the difference of two lines
                    steps, last = steps + [(int(m[3]) - last[1]) / (int(m[1]) - last[0])], (int(m[1]), int(m[3]))
            runs.append(dict(i=i, mode=mode, ms=st.median(steps or [0]), wall=wall, losses=losses))
            print(row % (rnd, specs[i][:30], mode, "%.1f" % runs[-1]["ms"], "%.1f" % wall, load, "%.2f" % (max(
                0, cpu() - c0 - own() + o0) / wall), status), flush=True)
        busy = busy and busy.kill()
    order.reverse()
print("\n%s, %d cores (%s), load average at the end %s" % (time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
      os.cpu_count(), re.search(r"model name\s*:\s*(.*)", open("/proc/cpuinfo").read())[1],
      " ".join(open("/proc/loadavg").read().split()[:3])) + "".join("\n  %s = %s" % x for x in zip(specs, names)))
print("%-30s %-5s %4s %8s %8s %8s %8s %10s %s" % ("spec", "mode", "runs", "ms/step", "min", "wall_s", "vs_first",
                                                 "busy/alone", "losses"))
med = lambda i, mode, key="ms": st.median([r[key] for r in runs if r["i"] == i and r["mode"] == mode] or [0])
for mode in modes:
    for i, spec in enumerate(specs):
        mine, ms, alone = [r for r in runs if r["i"] == i and r["mode"] == mode], med(i, mode), med(i, "alone")
        print("%-30s %-5s %4d %8.1f %8.1f %8.1f %7.2fx %10s %s" % (spec[:30], mode, len(mine), ms,
              min(r["ms"] for r in mine), med(i, mode, "wall"), ms / (med(0, mode) or 1), "%.2fx" % (ms / alone) if
              mode != "alone" and alone else "", "" if not i else "DIFFER" if any(r["losses"] != [r0["losses"] for
              r0 in runs if r0["mode"] == mode and r0["i"] == 0][0] for r in mine) else "= first"))
print("consoles: " + shutil.copytree(work, work + ".kept")) if os.environ.get("KEEP") else None
EOF
