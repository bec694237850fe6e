# Sourced by the benchmarks that run a coordinator of their own (scale.sh, two_cards.sh); needs
# $bin, the folder of the binaries.
# start_coord DB LOG [coordinator options]: starts moetune-coordinator on a random pair of loopback
# ports (another pair when they are taken, at most 5 tries), its stderr in LOG, and waits until it
# answers; sets wep, cep and coord (its pid). Returns 1, the log's tail on stderr, when it exits.
start_coord() {
  local db=$1 log=$2 try port
  shift 2
  for try in 1 2 3 4 5; do
    port=$((40000 + RANDOM % 10000))
    wep=tcp://127.0.0.1:$port cep=tcp://127.0.0.1:$((port + 1))
    "$bin/moetune-coordinator" --db "$db" --bind "$wep" --control "$cep" "$@" 2>"$log" &
    coord=$!
    until "$bin/moetune" status --control "$cep" --timeout-ms 200 >/dev/null 2>&1; do
      kill -0 "$coord" 2>/dev/null || break
      sleep 0.05
    done
    kill -0 "$coord" 2>/dev/null && return 0
    wait "$coord" 2>/dev/null || true
    grep -q "Address already in use" "$log" && [ "$try" -lt 5 ] && continue
    break
  done
  echo "the coordinator exited: $(tail -n 3 "$log")" >&2
  return 1
}
