#!/usr/bin/env bash
# Issue 28 item 5: GRPO, reinforce, reinforce_rloo and PPO side by side on Qwen2.5-Coder-0.5B-Instruct (LoRA), the
# budget file benchmarks/seed_side_by_side_0.5b.yaml, one seed. The base model is evaluated once: LoRA starts
# with B = 0, so every run's starting model is the base model. Each
# evaluation covers the 114 problems outside the training split (--n_eval 114: the seed's 30 eval problems, then
# the 84 held out, in the split's hash order); a later step splits them by task id. Resumable: an evaluation whose
# file exists is skipped, a stopped run resumes from its last checkpoint, a finished one is kept.
#   bash benchmarks/seed_model_side_by_side.sh [RUNS] [METHODS...]
# Status (2026-12-02): sized and checked (--check for all four methods), not yet run to the end; its first step, the base
# model's evaluation, was started and stopped at the end of the session.
set -euo pipefail
runs=${1:-runs/seed_0.5b_cpu}
shift || true
methods=${*:-ppo grpo reinforce reinforce_rloo}
config=benchmarks/seed_side_by_side_0.5b.yaml
export HF_HUB_OFFLINE=1
mkdir -p "$runs"
evaluate() {  # MODEL OUT
    [ -f "$2" ] || passk eval "$1" --config "$config" --n_eval 114 --dtype bfloat16 --out "$2"
}
stamp() { echo "[$(date -u +%H:%M:%S)] $*"; }
stamp "base model"
evaluate qwen2.5-coder-0.5b "$runs/base_eval114.json"
for m in $methods; do
    stamp "train $m"
    again=()  # a finished run is kept, a stopped one resumes from its last checkpoint, an empty start starts again
    if ls -d "$runs/$m"/checkpoint-* >/dev/null 2>&1; then again=(--resume true)
    elif [ -d "$runs/$m" ]; then again=(--overwrite true); fi
    passk train "$config" --method "$m" --eval_before false --eval_after false \
        --output_dir "$runs/$m" "${again[@]}"
    stamp "evaluate $m"
    evaluate "$runs/$m" "$runs/$m/eval114.json"
done
stamp "done"
