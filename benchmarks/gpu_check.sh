#!/usr/bin/env bash
# The CUDA paths run on a real GPU, sized for a short loan of a GPU machine.
#   bash benchmarks/gpu_check.sh OUT tests   gpu_tests, then the whole suite with CUDA visible beside main_job,
#                                            process_backend, wrong_device and bad_action
#   bash benchmarks/gpu_check.sh OUT bench   env_throughput, ensemble_throughput, sac_update_throughput, vs_ppo
#   bash benchmarks/gpu_check.sh OUT STEP... only those steps, in that order (e.g. after fixing what one found)
# Steps: gpu_tests (pytest -m gpu); suite (the rest, CUDA visible: device=auto picks cuda:0); main_job (the default
# config on cuda:0 and on the CPU, side by side: steps to the threshold and wall-clock); process_backend (collectors
# in spawned processes, each building its env on cuda:0: which processes map libcuda); wrong_device (env on cuda:0,
# device=cpu: the start-up error); bad_action (a DQN run whose env plants an out-of-range action index, with and
# without --debug); and the four benchmarks, each one JSON line with its peer.
# Each step has its own time limit; logs go to OUT/checks.log (the suite's to OUT/suite.log), JSON lines to
# OUT/bench.jsonl. Run from the repo root with torch, torchrl, tensordict, gymnasium (and, for the suite and
# vs_ppo, rsl_rl and stable-baselines3) importable by python3; ./run_async.sh needs .venv/bin/python, so one that
# execs python3 is made here when there is none.
set -uo pipefail
OUT="${1:?usage: gpu_check.sh OUT tests|bench|STEP...}"
shift
(($#)) || { echo "usage: gpu_check.sh OUT tests|bench|STEP..." >&2; exit 2; }
mkdir -p "$OUT"
LOG="$OUT/checks.log"
JSON="$OUT/bench.jsonl"
export PYTHONUNBUFFERED=1 RL_WARNINGS=0

# the run dirs of its trainings, each named after its step and removed when the step starts (so a step can run
# again on a warm machine)
RUNS=/tmp/gpu-check-runs

# step NAME LIMIT_S COMMAND...: run it under a limit, its output into the log, then its last lines on stdout
step() {
  local name="$1" limit="$2" start rc
  shift 2
  start=$(date +%s)
  rm -rf "${RUNS:?}/$name"  # the run dir of a training step is named after it
  echo "=== $name: $*" >>"$LOG"
  timeout -k 5 "$limit" "$@" >>"$LOG" 2>&1
  rc=$?
  echo "=== $name: rc=$rc in $(($(date +%s) - start)) s (limit $limit s)" | tee -a "$LOG"
  return 0
}

# json NAME LIMIT_S COMMAND...: a benchmark; its one JSON line (stdout) to OUT/<part>.jsonl, stderr to the log
json() {
  local name="$1" limit="$2" start rc
  shift 2
  start=$(date +%s)
  echo "=== $name: $*" >>"$LOG"
  timeout -k 5 "$limit" "$@" 2>>"$LOG" | tee -a "$JSON"
  rc=${PIPESTATUS[0]}
  echo "=== $name: rc=$rc in $(($(date +%s) - start)) s (limit $limit s)" | tee -a "$LOG"
}

if [[ ! -x .venv/bin/python ]]; then  # run_async.sh's install step is skipped: its stamp matches this python
  mkdir -p .venv/bin
  printf '#!/bin/sh\nexec python3 "$@"\n' >.venv/bin/python
  chmod +x .venv/bin/python
  (cat pyproject.toml; echo ""; .venv/bin/python --version) | sha256sum | cut -d' ' -f1 >.venv/.mbpo-install-base
fi

python3 - <<'EOF' | tee -a "$LOG"
import importlib, torch
print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU")
for name in ("tensordict", "torchrl", "gymnasium", "mujoco", "rsl_rl", "stable_baselines3"):
    try:
        print(name, getattr(importlib.import_module(name), "__version__", "?"))
    except Exception as exc:  # noqa: BLE001
        print(name, "MISSING", exc)
EOF

# MBPO_CHECK_DEVICE=cpu tries the plumbing on a machine with no GPU; MBPO_CHECK_TESTS narrows the suite
DEV="${MBPO_CHECK_DEVICE:-cuda}"
ENV_DEV="$DEV"; [[ "$DEV" == cuda ]] && ENV_DEV=cuda:0
read -r -a SUITE <<<"${MBPO_CHECK_TESTS:-tests}"
# the default config's run, short: steps to the threshold and wall-clock on each device
MAIN=(total_env_steps=1200 eval_every=200 eval_episodes=50)

gpu_tests() { step gpu_tests 120 python3 -m pytest "${SUITE[@]}" -m gpu -p no:cacheprovider -q -rs --timeout 100; }
# -v: each test's outcome as it ends, so a suite cut off by its limit still says which failed
suite() {
  LOG="$OUT/suite.log" step suite "${MBPO_CHECK_SUITE_S:-270}" python3 -m pytest "${SUITE[@]}" -m "not gpu" \
    -n "${MBPO_CHECK_WORKERS:-6}" -p no:cacheprovider -v -rfs --timeout 110
}
main_job() {
  (LOG="$OUT/main_gpu.log" step main_job_gpu 150 ./run_async.sh device="$DEV" env.device="$ENV_DEV" "${MAIN[@]}" \
     run_dir="$RUNS/main_job_gpu") &
  local gpu=$!
  step main_job_cpu 150 ./run_async.sh device=cpu env.device=cpu "${MAIN[@]}" run_dir="$RUNS/main_job_cpu"
  wait "$gpu"
  for d in "$RUNS/main_job_gpu" "$RUNS/main_job_cpu"; do
    echo "--- $d/metrics.csv (env_steps, wall_s, eval_return)" >>"$LOG"
    python3 -c "import csv,sys; [print(r['env_steps'], r['wall_s'], r['eval_return']) for r in csv.DictReader(open(sys.argv[1]))]" \
      "$d/metrics.csv" >>"$LOG" 2>&1
  done
}
process_backend() {
  # which processes have the CUDA driver mapped, once the collectors run: the trainer and each collector child
  (sleep 20; for p in $(pgrep -f "mbpo|multiprocessing"); do
     grep -q libcuda /proc/"$p"/maps 2>/dev/null && echo "pid $p maps libcuda: $(tr '\0' ' ' </proc/"$p"/cmdline | cut -c1-90)"
   done >>"$LOG") &
  step process_backend 60 python3 -m mbpo train device="$DEV" env.device="$ENV_DEV" runtime.backend=process \
    runtime.num_collectors=2 total_env_steps=400 eval_every=200 run_dir="$RUNS/process_backend"
}
wrong_device() {
  step wrong_device 45 python3 -m mbpo train device=cpu env.device="$ENV_DEV" total_env_steps=200 run_dir="$RUNS/wrong_device"
}
bad_action() {
  local fault=(train --config configs/cartpole_dqn.yaml env.id=FaultyCartPole-v0 env.factory=envs.faults:faulty
               "env.kwargs={at_step: 3}" total_env_steps=600 agent.learning_starts=100 eval_every=300 eval_episodes=2
               device="$DEV" env.device="$ENV_DEV" runtime.max_restarts=0)
  step bad_action_plain 45 ./run_async.sh "${fault[@]}" run_dir="$RUNS/bad_action_plain"
  step bad_action_debug 45 ./run_async.sh --debug "${fault[@]}" run_dir="$RUNS/bad_action_debug"
}
env_throughput() {
  json env_throughput 150 python3 benchmarks/env_throughput.py --device "$DEV" --repeats 3 --min-time 0.2
}
ensemble_throughput() {
  json ensemble_throughput 90 python3 benchmarks/ensemble_throughput.py --device "$DEV" --repeats 3
}
sac_update_throughput() {
  json sac_update_throughput 240 python3 benchmarks/sac_update_throughput.py --device "$DEV" --repeats 3 \
    --updates 100 --sizes halfcheetah
}
vs_ppo() {
  json vs_ppo 300 python3 benchmarks/vs_ppo.py --device "$DEV" --num-envs 4096 --learners ppo mbpo_scale sac_scale \
    --minutes "${MBPO_CHECK_PPO_MINUTES:-2}" --out "$OUT"
}

for part in "$@"; do
  case "$part" in
    tests)
      gpu_tests
      suite &
      running=$!
      main_job; process_backend; wrong_device; bad_action
      wait "$running" ;;
    bench) env_throughput; ensemble_throughput; sac_update_throughput; vs_ppo ;;
    gpu_tests | suite | main_job | process_backend | wrong_device | bad_action | env_throughput \
      | ensemble_throughput | sac_update_throughput | vs_ppo) "$part" ;;
    *) echo "unknown step $part; expected tests, bench or a step named in this script's header" >&2; exit 2 ;;
  esac
done
