#!/usr/bin/env bash
# The deploy files: systemd-analyze verify on every unit (Debian's systemd; any warning fails),
# the nightly unit runs submit --wait --compare-to last with options the CLI has, and the
# Kubernetes manifests pass tests/tools/check_k8s.py (images, binaries, flags, ports, volumes,
# GPU request). Each check is also run on a broken copy, which must fail.
source "$(dirname "$0")/lib.sh"
SRC=${MT_SOURCE_DIR:?}
command -v systemd-analyze >/dev/null || { echo "SKIP: no systemd-analyze (deploy/install-deps.sh installs systemd)"; exit 77; }

verify() { # DIR: verify every unit there with the binaries pointed at the build folder
  local d=$1
  sed -i "s|/usr/local/bin/|$(cd "$BIN" && pwd)/|g" "$d"/*
  systemd-analyze verify "$d"/*.service "$d"/*.timer >"$T/verify.log" 2>&1 && [ ! -s "$T/verify.log" ]
}
mkdir "$T/units"; cp "$SRC"/deploy/systemd/* "$T/units/"
verify "$T/units" || { cat "$T/verify.log" >&2; fail "systemd-analyze verify complains about deploy/systemd"; }
pass "systemd-analyze verify: $(ls "$T/units" | wc -l) units clean"

mkdir "$T/broken"; cp "$SRC"/deploy/systemd/* "$T/broken/"
sed -i 's/^Environment="MOETUNE_NIGHTLY_ARGS=\(.*\)"$/Environment=MOETUNE_NIGHTLY_ARGS=\1/' "$T/broken/moetune-nightly.service"
verify "$T/broken" && fail "an unquoted Environment= with spaces passed the check"
grep -q "Invalid environment assignment" "$T/verify.log" || fail "verify did not name the broken line"
pass "a broken unit fails the check"

# the nightly unit: exactly the compare-and-export command, with options submit has
exec_line=$(sed -n 's/^ExecStart=//p' "$SRC/deploy/systemd/moetune-nightly.service")
for want in "submit" "--wait" "--compare-to last" "--db /var/lib/moetune/moetune.db" "--out /var/lib/moetune/configs"; do
  case "$exec_line" in *" $want"*) ;; *) fail "nightly ExecStart lacks '$want'";; esac
done
grep -q "^ExecStartPost=" "$SRC/deploy/systemd/moetune-nightly.service" && fail "the nightly unit exports outside the compare"
known=$("$BIN/moetune" help submit)
for flag in $(echo "$exec_line" | grep -oE -- '--[a-z][a-z-]*' | sort -u); do
  grep -qE -- "^  $flag( |$)" <<<"$known" || fail "nightly ExecStart: submit has no option $flag"
done
pass "nightly unit runs submit --wait --compare-to last with known options"
for u in coordinator; do
  line=$(sed -n 's/^ExecStart=//p' "$SRC/deploy/systemd/moetune-$u.service")
  for flag in $(echo "$line" | grep -oE -- '--[a-z][a-z-]*' | sort -u); do
    "$BIN/moetune-coordinator" --help | grep -qE -- "^  $flag " || fail "coordinator unit: no option $flag"
  done
done
pass "coordinator unit flags are the daemon's"

python3 "$SRC/tests/tools/check_k8s.py" "$SRC/deploy/k8s" "$BIN" >"$T/k8s.log" 2>&1 || { cat "$T/k8s.log"; fail "deploy/k8s fails the manifest checks"; }
pass "deploy/k8s: images, binaries, flags, ports, volumes, GPU request"
for mut in 's/containerPort: 9464/containerPort: 9465/' 's/"--tp", "1"/"--tpx", "1"/' 's/limits: {nvidia.com\/gpu: 8}/limits: {}/' \
           's/claimName: data-moetune-coordinator-0/claimName: data/' 's/image: moetune:latest/image: other:1/'; do
  rm -rf "$T/k8s"; cp -r "$SRC/deploy/k8s" "$T/k8s"
  sed -i "$mut" "$T/k8s"/*.yaml
  cmp -s <(cat "$SRC"/deploy/k8s/*.yaml) <(cat "$T"/k8s/*.yaml) && fail "mutation '$mut' changed nothing"
  python3 "$SRC/tests/tools/check_k8s.py" "$T/k8s" "$BIN" >"$T/k8s.log" 2>&1 && fail "mutation '$mut' passed the manifest checks"
  grep -q "^check_k8s: " "$T/k8s.log" || fail "mutation '$mut': no reason printed"
done
pass "5 broken manifests fail the checks"
