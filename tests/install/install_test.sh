#!/usr/bin/env bash
# Tests of what `cmake --install` and `cpack -G DEB` produce (docs/install.md),
# run by ctest (tests/install/CMakeLists.txt) after the build:
#
#   install_test.sh tree  ...  installs the build into <work>/prefix, checks the
#       layout, builds tests/install/consumer against it with find_package and
#       with pkg-config, and runs both under <prefix>/bin/cohort run;
#   install_test.sh no-tests ... configures the source with
#       -DCOHORT_BUILD_TESTS=OFF into <work>: it must succeed with no test
#       and nothing that links GoogleTest;
#   install_test.sh deb   ...  runs cpack -G DEB into <work>/deb, checks the
#       packages' fields (every shared library the CLI needs and every
#       package cohort.pc requires is declared), extracts them into
#       <work>/root (never installs them) and builds and runs the consumer
#       against the extracted tree.
#
# Arguments after the mode: <source dir> <build dir> <work dir> <cmake> <cpack>
# <generator>. Everything is written under <work dir>, nothing in the source.
set -euo pipefail

mode=$1 src=$2 build=$3 work=$4 cmake=$5 cpack=$6 generator=$7
consumer_src=$src/tests/install/consumer

fail() {
  echo "FAIL: $*" >&2
  exit 1
}
step() { echo "== $*"; }

rm -rf "$work"
mkdir -p "$work"
cd "$work"

# The version of the build, from its generated config.h.
version=$(sed -n 's/^#define COHORT_VERSION "\(.*\)"$/\1/p' "$build/include/cohort/base/config.h")
[[ -n $version ]] || fail "no COHORT_VERSION in $build/include/cohort/base/config.h"
# Where the libraries go under the prefix (lib, or lib/<triplet> for a
# build configured with the prefix /usr on Debian).
libdir=$(sed -n 's/^CMAKE_INSTALL_LIBDIR:PATH=//p' "$build/CMakeCache.txt")
[[ -n $libdir ]] || fail "no CMAKE_INSTALL_LIBDIR in $build/CMakeCache.txt"

# check_layout <prefix> <libdir>: what an installed cohort must hold.
check_layout() {
  local prefix=$1 libdir=$2
  local f
  for f in bin/cohort include/cohort/cohort.h include/cohort/base/config.h include/cohort/base/isa.h \
           include/cohort/parallel/distributed_data_parallel.h "$libdir/libcohort_base.a" \
           "$libdir/libcohort_parallel.a" "$libdir/cmake/cohort/cohortConfig.cmake" \
           "$libdir/cmake/cohort/cohortConfigVersion.cmake" "$libdir/cmake/cohort/cohortTargets.cmake" \
           "$libdir/pkgconfig/cohort.pc"; do
    [[ -e $prefix/$f ]] || fail "$prefix/$f is missing"
  done
  # Every layer library that the build made is there.
  local lib
  for lib in $(cd "$build" && find cohort -name 'libcohort_*.a' -printf '%f\n'); do
    [[ -e $prefix/$libdir/$lib ]] || fail "$prefix/$libdir/$lib is missing (built in $build)"
  done
  # Tests' headers stay behind: no installed header needs GoogleTest.
  if grep -rl 'gtest/gtest.h\|gmock/gmock.h' "$prefix/include"; then
    fail "installed headers above include GoogleTest"
  fi
  if find "$prefix/include" -name '*_test.*' -o -name '*.cc' | grep .; then
    fail "sources or tests installed under $prefix/include"
  fi
}

# check_run <dir with ./consumer> <cohort>: two ranks, five steps each, the
# loss goes down and DDP leaves the same parameters on both ranks.
check_run() {
  local dir=$1 cohort=$2 out
  out=$(cd "$dir" && "$cohort" run --nproc-per-node 2 -- ./consumer 2>&1) ||
    fail "cohort run ./consumer in $dir failed: $out"
  echo "$out"
  local rank first last
  for rank in 0 1; do
    grep -q "consumer: cohort $version, rank $rank of 2" <<<"$out" || fail "rank $rank did not start"
    first=$(sed -n "s/.*rank $rank step 0 loss \([0-9.]*\)$/\1/p" <<<"$out")
    last=$(sed -n "s/.*rank $rank step 4 loss \([0-9.]*\)$/\1/p" <<<"$out")
    [[ -n $first && -n $last ]] || fail "rank $rank did not print its losses"
    awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a) }' ||
      fail "rank $rank: loss did not go down ($first -> $last)"
  done
  local sums
  sums=$(sed -n 's/.*rank [01] parameters checksum \(.*\)$/\1/p' <<<"$out" | sort -u)
  [[ $(wc -l <<<"$sums") -eq 1 && -n $sums ]] || fail "ranks end with different parameters: $sums"
}

# build_consumer <prefix> <dir>: the consumer through find_package(cohort).
build_consumer() {
  local prefix=$1 dir=$2
  "$cmake" -S "$consumer_src" -B "$dir" -G "$generator" -DCMAKE_PREFIX_PATH="$prefix" \
    -DCMAKE_BUILD_TYPE=Release >"$dir.configure.log" 2>&1 ||
    { cat "$dir.configure.log"; fail "configuring the consumer against $prefix failed"; }
  "$cmake" --build "$dir" >"$dir.build.log" 2>&1 ||
    { cat "$dir.build.log"; fail "building the consumer against $prefix failed"; }
}

# probe <prefix> <expect ok|fail> <find_package arguments...>
probe() {
  local prefix=$1 expect=$2
  shift 2
  local dir=$work/probe
  rm -rf "$dir"
  mkdir -p "$dir"
  printf 'cmake_minimum_required(VERSION 3.25)\nproject(probe LANGUAGES CXX)\nfind_package(cohort %s REQUIRED)\n' \
    "$*" >"$dir/CMakeLists.txt"
  if "$cmake" -S "$dir" -B "$dir/build" -G "$generator" -DCMAKE_PREFIX_PATH="$prefix" \
    >"$dir.log" 2>&1; then
    [[ $expect == ok ]] || fail "find_package(cohort $*) succeeded against $version"
  else
    [[ $expect == fail ]] || { cat "$dir.log"; fail "find_package(cohort $*) failed"; }
  fi
}

# owner_of <file>: the Debian package that holds it, through links and
# either name of a /usr-merged folder (dpkg knows /lib/..., the link leads to
# /usr/lib/...).
owner_of() {
  local real candidate
  real=$(readlink -f "$1")
  for candidate in "$real" "${real#/usr}" "/usr$real"; do
    dpkg -S "$candidate" 2>/dev/null | head -n 1 | cut -d: -f1 && return 0
  done
  return 0
}

# declares <Depends field> <package>: the field names the package, or a
# package that picks one of alternatives including it (libopenblas0 for
# libopenblas0-pthread, which provides libopenblas.so.0 through the
# alternatives system). What some declared package merely depends on does not
# count: the package must declare what it uses itself.
declares() {
  local field=$1 pkg=${2%%:*} dep
  # shellcheck disable=SC2013  # the field is split into words on purpose
  for dep in $(sed 's/([^)]*)//g; s/[,|]/ /g' <<<"$field"); do
    [[ $dep == "$pkg" ]] && return 0
    dpkg-query -W -f='${Depends}\n' "$dep" 2>/dev/null | head -n 1 | sed 's/([^)]*)//g' |
      tr ',' '\n' | grep '|' | tr '|' '\n' | tr -d ' ' | grep -x "$pkg" >/dev/null && return 0
  done
  return 1
}

if [[ $mode == no-tests ]]; then
  step "configure with -DCOHORT_BUILD_TESTS=OFF"
  "$cmake" -S "$src" -B "$work/tree" -G "$generator" -DCOHORT_BUILD_TESTS=OFF >configure.log 2>&1 ||
    { cat configure.log; fail "configuring with -DCOHORT_BUILD_TESTS=OFF failed"; }
  ! grep -qi 'gtest' "$work/tree/build.ninja" || fail "the build without tests still links GoogleTest"
  tests=$(cd "$work/tree" && ctest -N | sed -n 's/^Total Tests: //p')
  [[ $tests == 0 ]] || fail "the build without tests has $tests tests"
  echo "PASS: install_test.sh no-tests"
  exit 0
fi

case $mode in
  tree)
    prefix=$work/prefix
    step "cmake --install $build --prefix $prefix"
    "$cmake" --install "$build" --prefix "$prefix" >install.log 2>&1 ||
      { cat install.log; fail "cmake --install failed"; }
    check_layout "$prefix" "$libdir"

    if [[ -d $build/python/cohort_torch ]]; then
      step "the torch.distributed backend: cohort_torch in the prefix's dist-packages"
      pkg=$(find "$prefix/lib" -path '*dist-packages/cohort_torch' -type d | head -n 1)
      [[ -n $pkg && -f $pkg/__init__.py ]] || fail "cmake --install put no cohort_torch under $prefix/lib"
      compgen -G "$pkg/_C*.so" >/dev/null || fail "$pkg has no extension _C"
      PYTHONPATH=$(dirname "$pkg") /usr/bin/python3 -c \
        "import cohort_torch, torch.distributed as d; assert 'COHORT' in d.Backend._plugins" ||
        fail "the installed cohort_torch does not register the backend"
    fi

    step "find_package(cohort): versions and components"
    IFS=. read -r major minor _ <<<"$version"
    probe "$prefix" ok "$major.$minor COMPONENTS base core parallel"
    probe "$prefix" fail "$((major + 1)).0"
    probe "$prefix" fail "COMPONENTS no_such_layer"

    step "consumer with find_package(cohort), run under $prefix/bin/cohort run"
    build_consumer "$prefix" "$work/cmake-consumer"
    check_run "$work/cmake-consumer" "$prefix/bin/cohort"

    step "consumer with pkg-config"
    export PKG_CONFIG_PATH=$prefix/$libdir/pkgconfig
    [[ $(pkg-config --modversion cohort) == "$version" ]] || fail "pkg-config --modversion cohort"
    flags=$(pkg-config --cflags --libs cohort) || fail "pkg-config --cflags --libs cohort"
    mkdir -p pc-consumer
    # shellcheck disable=SC2086  # the flags are words
    c++ -O1 -o pc-consumer/consumer "$consumer_src/consumer.cc" $flags >pc-consumer.log 2>&1 ||
      { cat pc-consumer.log; fail "c++ consumer.cc \$(pkg-config --cflags --libs cohort) failed"; }
    check_run "$work/pc-consumer" "$prefix/bin/cohort"
    ;;

  deb)
    step "cpack -G DEB"
    "$cpack" --config "$build/CPackConfig.cmake" -G DEB -B "$work/deb" >cpack.log 2>&1 ||
      { cat cpack.log; fail "cpack -G DEB failed"; }
    arch=$(dpkg --print-architecture)
    runtime=$work/deb/cohort_${version}_$arch.deb
    dev=$work/deb/cohort-dev_${version}_$arch.deb
    [[ -f $runtime && -f $dev ]] || { ls "$work/deb"; fail "cohort and cohort-dev packages not made"; }
    runtime_info=$(dpkg-deb --info "$runtime")
    echo "$runtime_info"
    dpkg-deb --info "$dev"
    for deb in "$runtime" "$dev"; do
      [[ -n $(dpkg-deb -f "$deb" Maintainer) ]] || fail "$deb has no Maintainer"
      [[ $(dpkg-deb -f "$deb" Version) == "$version" ]] || fail "$deb is not version $version"
    done
    grep -q '^ Depends: .*libopenblas' <<<"$runtime_info" || fail "dpkg-deb --info shows no Depends on OpenBLAS"

    step "cohort declares every shared library the CLI needs"
    depends=$(dpkg-deb -f "$runtime" Depends)
    for soname in $(objdump -p "$build/tools/cohort/cohort" | awk '$1 == "NEEDED" { print $2 }'); do
      path=$(ldconfig -p | awk -v s="$soname" '$1 == s && !done { print $NF; done = 1 }')
      [[ -n $path ]] || fail "cannot find $soname"
      if [[ $(readlink -f "$path") == /usr/local/cuda* ]]; then
        # A build with the CUDA layer: NVIDIA's toolkit, not a Debian package,
        # provides cudart, cuBLASLt and cuDNN (the package's description says so).
        grep -q 'CUDA' <<<"$runtime_info" || fail "$soname comes from the CUDA toolkit, unsaid"
        echo "$soname: the CUDA toolkit's"
        continue
      fi
      owner=$(owner_of "$path")
      [[ -n $owner ]] || fail "no Debian package owns $path ($soname)"
      declares "$depends" "$owner" || fail "cohort's Depends ($depends) lacks $owner ($soname)"
      echo "$soname: $owner declared"
    done

    step "cohort-dev declares cohort and what cohort.pc requires"
    dev_depends=$(dpkg-deb -f "$dev" Depends)
    grep -q "cohort (= $version)" <<<"$dev_depends" || fail "cohort-dev does not depend on cohort (= $version)"
    requires=$(dpkg-deb --fsys-tarfile "$dev" | tar -xO "./usr/$libdir/pkgconfig/cohort.pc" |
      sed -n 's/^Requires: //p')
    for module in $requires; do
      pc=$(readlink -f "$(pkg-config --variable=pcfiledir "$module")/$module.pc")
      owner=$(owner_of "$pc")
      [[ -n $owner ]] || fail "no Debian package owns $pc"
      declares "$dev_depends" "$owner" || fail "cohort-dev's Depends ($dev_depends) lacks $owner ($module)"
      echo "$module: $owner declared"
    done

    step "extracted packages (dpkg-deb -x, not installed): cohort info and the consumer"
    root=$work/root
    dpkg-deb -x "$runtime" "$root"
    dpkg-deb -x "$dev" "$root"
    check_layout "$root/usr" "$libdir"
    info=$("$root/usr/bin/cohort" info) || fail "extracted cohort info failed"
    echo "$info"
    grep -q "^cohort $version" <<<"$info" || fail "cohort info does not say $version"
    build_consumer "$root/usr" "$work/deb-consumer"
    check_run "$work/deb-consumer" "$root/usr/bin/cohort"
    ;;
  *)
    fail "unknown mode $mode"
    ;;
esac
echo "PASS: install_test.sh $mode"
