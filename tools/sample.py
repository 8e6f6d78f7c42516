"""Sampled continuations of a prompt from a finished run: the model of logs/<RUN_ID>/ (its artifact, or with --raw the
unquantized final_model.pt), built with the settings of the run's log (`config:` lines) and read with that run's
tokenizer (its TOKENIZER_PATH, or --tokenizer).

    tools/py tools/sample.py logs/<RUN_ID> [--prompt TEXT] [--samples 3] [--tokens 60] [--temperature 0.8] [--raw]

Run it from the folder the run started in (relative DATA_PATH/TOKENIZER_PATH in the log are relative to it).
Prints each continuation after the prompt, one block per sample; CPU unless CUDA is available.
"""
import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def run_config(log_path: Path) -> dict:
    """The run's settings as the environment that reproduces them: {"NUM_LAYERS": "4", ...} from `config:` lines."""
    environ = {}
    for line in log_path.read_text(encoding="utf-8", errors="replace").splitlines():
        if line.startswith("config:") and "=" in line:
            name, _, value = line[len("config:"):].partition("=")
            environ[name.upper()] = value
    if not environ:
        raise SystemExit("error: %s holds no config: lines (is it the trainer's file log logs/<RUN_ID>.txt?)"
                         % log_path)
    return environ


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="tools/py tools/sample.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", help="the run's outputs folder logs/<RUN_ID> (its log is logs/<RUN_ID>.txt)")
    parser.add_argument("--prompt", default="The history of the", help="text to continue (default %(default)r)")
    parser.add_argument("--samples", type=int, default=3, help="continuations to print (default %(default)s)")
    parser.add_argument("--tokens", type=int, default=60, help="tokens per continuation (default %(default)s)")
    parser.add_argument("--temperature", type=float, default=0.8, help="0: greedy (default %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed (default %(default)s)")
    parser.add_argument("--raw", action="store_true", help="final_model.pt instead of the artifact")
    parser.add_argument("--tokenizer", help="the SentencePiece model (default: the run's TOKENIZER_PATH)")
    args = parser.parse_args(argv)
    folder = Path(args.run.rstrip("/"))
    log_path = folder.parent / (folder.name + ".txt")
    if not log_path.is_file():
        raise SystemExit("error: %s: no such log (give the run's outputs folder, logs/<RUN_ID>)" % log_path)
    environ = run_config(log_path)
    import sentencepiece
    import torch
    import train_gpt as tg

    h = tg.Hyperparameters.from_env(environ)
    tokenizer_path = args.tokenizer or h.tokenizer_path
    if not os.path.isfile(tokenizer_path):
        raise SystemExit("error: the run's tokenizer %s is not here (run from the run's folder, or pass --tokenizer)"
                         % tokenizer_path)
    sp = sentencepiece.SentencePieceProcessor(model_file=tokenizer_path)
    if sp.vocab_size() != h.vocab_size:
        raise SystemExit("error: %s has %d pieces, the run's VOCAB_SIZE is %d" % (tokenizer_path, sp.vocab_size(),
                                                                                   h.vocab_size))
    device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    make_model = lambda: tg.build_model(h, device)  # noqa: E731
    path = folder / (tg.RAW_MODEL_FILENAME if args.raw else tg.ARTIFACT_FILENAME)
    if not path.is_file():
        raise SystemExit("error: %s: no such file (a run with FINAL_EVAL=1 writes it)" % path)
    if args.raw:
        model = make_model()
        model.load_state_dict(torch.load(path, map_location=device, weights_only=True))
    else:
        model = tg.load_artifact_model(str(path), make_model)
    model.looping = h.num_loops > 0  # looping is on for every eval after training
    model.eval()
    prompt = [sp.bos_id()] + sp.encode(args.prompt) if sp.bos_id() >= 0 else sp.encode(args.prompt)
    generator = torch.Generator(device=device).manual_seed(args.seed)
    print("model: %s (%s), tokenizer: %s" % (path, "raw" if args.raw else "artifact", tokenizer_path))
    for sample in range(args.samples):
        ids = torch.tensor([prompt], device=device)
        with torch.no_grad():
            for _ in range(args.tokens):
                logits = model.logits_from_hidden(model.forward_hidden(ids[:, -h.train_seq_len:]))[0, -1].float()
                if args.temperature <= 0:
                    token = logits.argmax()
                else:
                    probs = torch.softmax(logits / args.temperature, dim=-1)
                    token = torch.multinomial(probs, 1, generator=generator)[0]
                ids = torch.cat([ids, token.view(1, 1)], dim=1)
        print("--- sample %d ---" % (sample + 1))
        print(sp.decode([token for token in ids[0].tolist() if token != sp.bos_id()]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
