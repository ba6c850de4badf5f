#!/bin/sh
# check.sh BUILD PREFIX CC - installs the build into PREFIX (cmake --install),
# builds tests/install/hello.c against it with pkg-config alone, runs it and
# checks the text.  The ctest test_install_pkgconfig.
set -eu
build=$1 prefix=$2 cc=$3
src=$(dirname "$0")/hello.c
rm -rf "$prefix"
cmake --install "$build" --prefix "$prefix" >/dev/null
pc=$(dirname "$(find "$prefix" -name kvant.pc)")
export PKG_CONFIG_PATH="$pc"
flags=$(pkg-config --cflags --libs --static kvant)
echo "pkg-config --cflags --libs --static kvant: $flags"
find "$prefix" -type f | sort
# every public header stands alone (includes what it needs, nothing from the source tree)
for h in kvant_base.h kvant_infer.h kvant_compress.h kvant_train.h kvant.h; do
  echo "#include <$h>" | "$cc" -std=c11 -Wall -Wextra -Werror -fsyntax-only $(pkg-config --cflags kvant) -x c -
  echo "$h compiles on its own"
done
"$cc" -std=c11 -o "$prefix/hello" "$src" $flags
LD_LIBRARY_PATH="$prefix/lib:${LD_LIBRARY_PATH:-}" "$prefix/hello" | tee "$prefix/hello.out"
grep -q "there was a little girl" "$prefix/hello.out"
echo "6 passed, 0 failed"
