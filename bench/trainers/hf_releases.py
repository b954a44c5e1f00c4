"""Measure what each transformers release's Trainer does to gradient accumulation.

Each release runs in its own scratch virtual environment outside the repository (torch==2.13.0
installed first, then the release and an accelerate of its time), because a Trainer's loss
normalisation changed across releases and must be measured, not assumed. In each environment the
same tiny models (GPT-2 and Llama, built from configs in code) are checked by verify_hf_trainer
on the same nine padded micro-batches (N=4: two full windows and a last window of one), and the
verdict, the named cause and each step's scale against the window's token-mean gradient are
printed as a table.

    python bench/trainers/hf_releases.py                       # every release below; builds missing venvs
    python bench/trainers/hf_releases.py --releases 4.45.2 5.23.0 --venvs /tmp/tf-venvs

Not part of the test suite (the suite tests the adapter against the installed transformers).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

# release -> the accelerate of its time (pip resolves tokenizers and huggingface_hub from the
# release's own pins). 4.45.2 is the last release before the October 2024 fix (4.46.0).
RELEASES = {
    "4.45.2": "accelerate==1.0.1",
    "4.46.0": "accelerate==1.0.1",
    "4.46.3": "accelerate==1.1.1",
    "4.48.3": "accelerate==1.3.0",
    "4.50.3": "accelerate==1.6.0",
    "4.53.3": "accelerate==1.9.0",
    "4.57.6": "accelerate==1.11.0",
    "5.0.0": "accelerate==1.12.0",
    "5.23.0": "accelerate==1.15.0",
}
REPO = Path(__file__).resolve().parents[2]
VOCAB = 64
# Valid tokens of the two rows of each micro-batch; each micro-batch is as wide as its longest row.
LENGTHS = [[8, 3], [6, 6], [2, 2], [8, 7], [5, 1], [8, 8], [4, 4], [8, 2], [7, 3]]


def ensure_venv(venvs: Path, release: str) -> Path:
    python = venvs / release / "bin" / "python"
    probe = [str(python), "-c", "import transformers, accelerate"]
    if python.exists() and subprocess.run(probe, capture_output=True).returncode == 0:
        return python
    subprocess.run([sys.executable, "-m", "venv", str(venvs / release)], check=True)
    pip = [str(python), "-m", "pip", "install", "-q"]
    subprocess.run(pip + ["torch==2.13.0"], check=True)  # pinned first: never let pip resolve torch
    subprocess.run(pip + [f"transformers=={release}", RELEASES.get(release, "accelerate")], check=True)
    return python


def padded_micro_batches(torch):
    g = torch.Generator().manual_seed(1)
    batches = []
    for lengths in LENGTHS:
        width = max(lengths)
        mask = torch.tensor([[1] * n + [0] * (width - n) for n in lengths])
        ids = torch.randint(1, VOCAB, (len(lengths), width), generator=g) * mask
        batches.append({"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)})
    return batches


def tiny(name: str):
    import torch
    import transformers as tf

    torch.manual_seed(0)
    special = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2)
    if name == "gpt2":
        return tf.GPT2LMHeadModel(tf.GPT2Config(vocab_size=VOCAB, n_positions=32, n_embd=16, n_layer=1, n_head=2,
                                                resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, **special))
    return tf.LlamaForCausalLM(tf.LlamaConfig(vocab_size=VOCAB, hidden_size=16, intermediate_size=32,
                                              num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
                                              max_position_embeddings=32, **special))


def child(out_dir: str) -> None:
    """Runs inside one release's venv: one JSON line per model."""
    import torch
    import transformers as tf

    from gradcheck_accum.verifier.trainers.hf_trainer import verify_hf_trainer

    for name in ("gpt2", "llama"):
        args = tf.TrainingArguments(output_dir=out_dir, gradient_accumulation_steps=4, per_device_train_batch_size=2,
                                    learning_rate=1e-3, max_grad_norm=0.0, report_to="none", use_cpu=True)
        trainer = tf.Trainer(model=tiny(name), args=args)
        report = verify_hf_trainer(trainer, padded_micro_batches(torch), device="cpu")
        ran = [int(m.group(1)) for n in report.notes for m in [re.search(r"ran the model (\d+) times", n)] if m]
        print(json.dumps({
            "release": tf.__version__, "model": name, "verdict": report.verdict,
            "read": ran[0] if ran else len(LENGTHS),
            "findings": report.settings["findings"], "steps": report.settings["optimizer_steps"],
            "scales": [round(m.scale, 4) for m in report.modes], "diagnosis": report.diagnosis,
        }), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--releases", nargs="*", default=list(RELEASES))
    parser.add_argument("--venvs", type=Path, default=Path("/tmp/tf-venvs"))
    parser.add_argument("--child", metavar="OUT_DIR", help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.child:
        child(opts.child)
        return
    opts.venvs.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(REPO), "TOKENIZERS_PARALLELISM": "false"}
    print(f"{'release':<9} {'model':<6} {'verdict':<9} {'steps':<5} {'read':<4} {'scale per step':<26} findings")
    for release in opts.releases:
        python = ensure_venv(opts.venvs, release)
        run = subprocess.run([str(python), __file__, "--child", str(opts.venvs / "out")], env=env,
                             capture_output=True, text=True)
        rows = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
        if not rows:
            print(f"{release:<9} failed: {run.stderr.strip().splitlines()[-1] if run.stderr.strip() else run.returncode}")
        for r in rows:
            cause = ", ".join(r["findings"]) or "-"
            print(f"{r['release']:<9} {r['model']:<6} {r['verdict']:<9} {r['steps']:<5} {r['read']:<4} "
                  f"{str(r['scales']):<26} {cause}")
            if r["verdict"] != "match":
                print(f"{'':<9} {r['diagnosis']}")


if __name__ == "__main__":
    main()
