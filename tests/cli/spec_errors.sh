#!/usr/bin/env bash
# A malformed --kv spec gives exit status 2 and one line on stderr naming the bad part.
set -u
bin=$1
fail=0
check() {
  local spec=$1 fragment=$2
  local err rc
  err=$("$bin" attn-bench --ctx 16 --layers 1 --kv "$spec" 2>&1 >/dev/null)
  rc=$?
  if [[ $rc -ne 2 ]]; then echo "FAIL: '$spec' exit $rc (want 2)"; fail=1; fi
  if [[ $(printf '%s\n' "$err" | wc -l) -ne 1 ]]; then echo "FAIL: '$spec' printed more than one line: $err"; fail=1; fi
  if [[ $err != *"$fragment"* ]]; then echo "FAIL: '$spec' message lacks '$fragment': $err"; fail=1; fi
}
check 'q4:bits=x' "'bits'"
check 'nosuch' "'nosuch'"
check 'q4:rot=2' 'rot=2'
check 'k=q4' 'v=SPEC'
check 'ratequant:avg=5' 'avg=5 is outside [lo, hi]'
check 'ratequant:avg=2.5,lo=3' 'avg=2.5 is outside [lo, hi]'
check 'ratequant:base=kvquant,lo=1,avg=2' 'kvquant takes bits in [2, 4]'
check 'k=ratequant,v=fp16' 'cannot be one side'
"$bin" attn-bench --no-such-flag >/dev/null 2>&1
[[ $? -eq 2 ]] || { echo "FAIL: unknown flag does not exit 2"; fail=1; }
exit $fail
