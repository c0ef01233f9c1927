#!/usr/bin/env bash
# Runs a document's code blocks as its reader would (tests/docs/CMakeLists.txt):
#
#   doc_blocks.sh <markdown file> <build dir> <work dir> <cmake>
#
# installs the build into <work>/prefix, puts its bin/ on PATH and the prefix
# in CMAKE_PREFIX_PATH (as for a user who installed cohort there), then goes
# through the document's fenced blocks in order, in <work>/project:
#
#   ```<lang> file=NAME   (cpp, cmake, ...) appended to NAME; all of them are
#                         written before any command runs, so a build command
#                         may come before the files it builds;
#   ```sh [id=ID] [same-accuracy-as=ID]
#                         run with bash -euo pipefail; a failure fails the test;
#   ```sh hosts=2         two nodes of one job, one command line each ("on host
#                         A" / "on host B"): run at once on this machine, with
#                         host A's address 10.0.0.1 -> 127.0.0.1, port 29500 ->
#                         a free port, /shared/... -> a folder under <work>;
#                         export lines apply to both;
#   ```text output        output shown for the sh block before it: every line
#                         must appear in that block's output, with each run
#                         of digits standing for any number;
#   ``` or ```text        not code (a usage synopsis, a file layout): skipped.
#
# Any other fenced block (a cpp block without file=, an unknown language) is
# an error: every code block of the document is built, run or checked.
# With min-accuracy=A on an sh block, every "test accuracy X" it prints must
# be at least A; with same-accuracy-as=ID, equal to the last one that block
# ID printed (a checkpoint scores what the run that wrote it scored).
set -euo pipefail

doc=$1 build=$2 work=$3 cmake=$4

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

rm -rf "$work"
mkdir -p "$work/project" "$work/blocks"
"$cmake" --install "$build" --prefix "$work/prefix" >"$work/install.log" 2>&1 ||
  { cat "$work/install.log"; fail "cmake --install $build failed"; }
export PATH=$work/prefix/bin:$PATH
export CMAKE_PREFIX_PATH=$work/prefix

# Split the document into blocks/NNN.{info,body}.
awk -v dir="$work/blocks" '
  /^```/ {
    if (!inside) { inside = 1; n++; info = substr($0, 4); print info > sprintf("%s/%03d.info", dir, n); body = sprintf("%s/%03d.body", dir, n); printf "" > body; next }
    inside = 0; close(body); next
  }
  inside { print >> body }
  END { if (inside) { print "unterminated block " n > "/dev/stderr"; exit 1 } }
' "$doc" || fail "cannot split $doc into blocks"

blocks=$(cd "$work/blocks" && ls -- *.info 2>/dev/null | sed 's/\.info$//' | sort)
[[ -n $blocks ]] || fail "$doc has no code blocks"

attr() { sed -n "s/.*\\b$1=\\([^ ]*\\).*/\\1/p" <<<"$2"; }

# Pass 1: the files.
for b in $blocks; do
  info=$(cat "$work/blocks/$b.info")
  lang=${info%% *}
  file=$(attr file "$info")
  case $lang in
    sh | text | "") [[ -z $file ]] || fail "block $b ($info): a ${lang:-plain} block is not a file" ;;
    *)
      [[ -n $file ]] || fail "block $b of $doc ($info) is neither a file=, sh nor text block"
      mkdir -p "$(dirname "$work/project/$file")"
      cat "$work/blocks/$b.body" >>"$work/project/$file"
      ;;
  esac
done

# A port for the two-host job's store, away from the launcher's default.
free_port() { echo $((20000 + RANDOM % 20000)); }

# run_two_hosts <block>: the block's two command lines as two nodes.
run_two_hosts() {
  local body=$1 port line exports=() nodes=() pids=() rc=0 i
  port=$(free_port)
  while IFS= read -r line; do
    [[ -z ${line// /} || $line == \#* ]] && continue
    line=${line//10.0.0.1/127.0.0.1}
    line=${line//--master-port 29500/--master-port $port}
    line=${line//\/shared\//$work/shared/}
    if [[ $line == export\ * ]]; then exports+=("$line"); else nodes+=("$line"); fi
  done <"$body"
  [[ ${#nodes[@]} -eq 2 ]] || fail "a hosts=2 block needs two command lines, got ${#nodes[@]}"
  mkdir -p "$work/shared"
  for i in 0 1; do
    (
      for line in "${exports[@]}"; do eval "$line"; done
      eval "${nodes[$i]}"
    ) >"$work/node$i.log" 2>&1 &
    pids+=($!)
  done
  for i in 0 1; do wait "${pids[$i]}" || rc=1; done
  cat "$work/node0.log" "$work/node1.log"
  return $rc
}

# Pass 2: the commands, in order, with their shown output checked.
last_out=
declare -A accuracy_of
for b in $blocks; do
  info=$(cat "$work/blocks/$b.info")
  lang=${info%% *}
  body=$work/blocks/$b.body
  case $lang in
    sh)
      out=$work/blocks/$b.out
      echo "== block $b: $(head -c 300 "$body" | tr '\n' ';')"
      if [[ $(attr hosts "$info") == 2 ]]; then
        (cd "$work/project" && run_two_hosts "$body") >"$out" 2>&1 || { cat "$out"; fail "block $b failed"; }
      else
        (cd "$work/project" && bash -euo pipefail "$body") >"$out" 2>&1 || { cat "$out"; fail "block $b failed"; }
      fi
      cat "$out"
      last_out=$out
      id=$(attr id "$info") same=$(attr same-accuracy-as "$info") min=$(attr min-accuracy "$info")
      for a in $(sed -n 's/.*test accuracy \([0-9.]*\).*/\1/p' "$out"); do
        [[ -z $min ]] || awk -v a="$a" -v m="$min" 'BEGIN { exit !(a >= m) }' ||
          fail "block $b: test accuracy $a is below $min"
        [[ -n $id ]] && accuracy_of[$id]=$a
        if [[ -n $same ]]; then
          [[ ${accuracy_of[$same]:-} == "$a" ]] ||
            fail "block $b: test accuracy $a, but block $same printed ${accuracy_of[$same]:-none}"
          echo "block $b: test accuracy $a, as block $same"
        fi
      done
      [[ -z $same || -n $(sed -n 's/.*test accuracy \([0-9.]*\).*/\1/p' "$out") ]] ||
        fail "block $b printed no test accuracy to compare with block $same"
      ;;
    text)
      [[ $info == "text output" ]] || continue
      [[ -n $last_out ]] || fail "block $b: output shown before any command"
      while IFS= read -r line; do
        [[ -z ${line// /} ]] && continue
        pattern=$(sed 's/[][\.*^$+?(){}|/]/\\&/g; s/[0-9][0-9]*/[0-9]+/g' <<<"$line")
        grep -Eq -- "$pattern" "$last_out" ||
          fail "block $b: the output shown ('$line') is not what the command printed (no /$pattern/ in $last_out)"
      done <"$body"
      ;;
  esac
done
echo "PASS: doc_blocks.sh $(basename "$doc")"
