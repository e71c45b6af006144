#!/usr/bin/env bash
# Issue 28 item 5: GRPO, reinforce, reinforce_rloo and PPO side by side on Qwen2.5-Coder-0.5B-Instruct (LoRA), the
# budget file benchmarks/seed_side_by_side_0.5b.yaml, one seed. The base model is evaluated once: LoRA starts
# with B = 0, so every run's starting model is the base model. Each
# evaluation covers the 114 problems outside the training split (--n_eval 114: the seed's 30 eval problems, then
# the 84 held out, in the split's hash order); a later step splits them by task id. Resumable: an evaluation whose
# file exists is skipped, a stopped run resumes from its last checkpoint, a finished one is kept; on a fresh machine
# the evaluations and records committed under benchmarks/results/seed_model/side_by_side_0.5b/ are used, not redone.
#   bash benchmarks/seed_model_side_by_side.sh [RUNS] [METHODS...]
# The dtype is the faster of bfloat16 and float32 in a timed decode step on this host (RUNS/probe.json, measured once):
# bf16 won on an AMX/AVX512-BF16 host, float32 won 2.7x on an AVX2-only one.
set -euo pipefail
runs=${1:-runs/seed_0.5b_cpu}
shift || true
methods=${*:-ppo grpo reinforce reinforce_rloo}
config=benchmarks/seed_side_by_side_0.5b.yaml
export HF_HUB_OFFLINE=1
mkdir -p "$runs"
[ -f "$runs/probe.json" ] || python -c "
import json, sys; sys.path.insert(0, 'benchmarks')
from seed_model_base import probe_dtype
from experiments.inputs.models import resolve_model
print(json.dumps(probe_dtype(resolve_model('qwen2.5-coder-0.5b'), 2)))" > "$runs/probe.json"
dtype=$(python -c "import json, sys; print(json.load(open(sys.argv[1]))['dtype'])" "$runs/probe.json")
evaluate() {  # MODEL OUT
    [ -f "$2" ] || passk eval "$1" --config "$config" --n_eval 114 --dtype "$dtype" --out "$2"
}
stamp() { echo "[$(date -u +%H:%M:%S)] $*"; }
# On a fresh machine, what earlier sessions committed stands in for their runs (the probe is this host's own).
done_dir=benchmarks/results/seed_model/side_by_side_0.5b
[ -f "$runs/base_eval114.json" ] || [ ! -f "$done_dir/base_eval114.json" ] || cp "$done_dir/base_eval114.json" "$runs/"
stamp "base model ($dtype)"
evaluate qwen2.5-coder-0.5b "$runs/base_eval114.json"
for m in $methods; do
    if [ ! -f "$runs/$m/eval114.json" ] && [ -f "$done_dir/$m/eval114.json" ]; then
        rm -rf "$runs/$m" && cp -r "$done_dir/$m" "$runs/$m"
    fi
    if [ -f "$runs/$m/eval114.json" ]; then stamp "$m: trained and evaluated already"; continue; fi
    stamp "train $m"
    again=()  # a finished run is kept, a stopped one resumes from its last checkpoint, an empty start starts again
    if ls -d "$runs/$m"/checkpoint-* >/dev/null 2>&1; then again=(--resume true)
    elif [ -d "$runs/$m" ]; then again=(--overwrite true); fi
    passk train "$config" --method "$m" --eval_before false --eval_after false \
        --model_init_kwargs "{\"dtype\": \"$dtype\"}" --output_dir "$runs/$m" "${again[@]}"
    stamp "evaluate $m"
    cp "$runs/probe.json" "$runs/$m/probe.json"  # the dtype it is evaluated in, and why
    evaluate "$runs/$m" "$runs/$m/eval114.json"
done
stamp "done"
