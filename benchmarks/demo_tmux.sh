#!/usr/bin/env bash
# `cudaforge demo` in a real terminal (tmux) at 80x24: first full screen, `n` steps, `q` quits.
# Usage: bash benchmarks/demo_tmux.sh   (needs tmux and the cudaforge console script on PATH)
set -u
session=cf-demo-$$
tmux kill-session -t "$session" 2>/dev/null
start=$(date +%s%N)
tmux new-session -d -s "$session" -x 80 -y 24 "TERM=xterm-256color cudaforge demo; echo EXITED \$?; sleep 5"
first=""
for _ in $(seq 1 200); do
  screen=$(tmux capture-pane -p -t "$session")
  if grep -q "kernel · iter 0" <<<"$screen"; then first=$(( ($(date +%s%N) - start) / 1000000 )); break; fi
  sleep 0.05
done
echo "first full screen after ${first:-never} ms (from starting the command)"
tmux capture-pane -p -t "$session" > /tmp/cf-demo-before.txt
tmux send-keys -t "$session" n
sleep 1
tmux capture-pane -p -t "$session" > /tmp/cf-demo-after.txt
grep -o "kernel · iter [0-9]" /tmp/cf-demo-before.txt /tmp/cf-demo-after.txt
tmux send-keys -t "$session" q
sleep 2
tmux capture-pane -p -t "$session" | grep -o "EXITED [0-9]*" || echo "did not exit"
cat /tmp/cf-demo-after.txt
tmux kill-session -t "$session" 2>/dev/null
