#!/usr/bin/env bash
# check_package.sh — proves the install and the Debian package: `cmake --install` into a fresh
# prefix gives bin/gpupool, the library, the header, a pkg-config file whose `preload` variable
# names the installed library and whose paths have no `..` in them, and the plotter; on Debian the
# library is in the multiarch folder (lib/<triplet>); the installed command finds the installed
# library by itself (`gpupool run`) and prints its help; `cpack -G DEB` builds a .deb holding the
# same files under /usr, the library stripped and gpupool.pc naming /usr (checked with dpkg-deb
# when it is there).
# Usage: check_package.sh <build dir> <libdir> <cmake> <cpack> [sanitizers of the build]
set -u
build=$1 libdir=$2 cmake=$3 cpack=$4 sanitize=${5:-}
unset "${!GPUPOOL_@}" LD_PRELOAD
tmp=$(mktemp -d /tmp/gpupool-package-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL package_install: $*" >&2; exit 1; }
ok() { echo "ok   $*"; }

"$cmake" --install "$build" --prefix "$tmp/prefix" >"$tmp/install.log" 2>&1 ||
	fail "cmake --install failed: $(cat "$tmp/install.log")"
for f in bin/gpupool "$libdir/libgpupool.so" include/gpupool.h "$libdir/pkgconfig/gpupool.pc" \
	share/gpupool/plot-trace share/doc/gpupool/copyright; do
	[[ -e $tmp/prefix/$f ]] || fail "cmake --install did not install $f"
done
grep -q "^MIT License" "$tmp/prefix/share/doc/gpupool/copyright" || fail "the installed copyright is not the MIT licence"
ok "cmake --install: bin/gpupool, $libdir/libgpupool.so, include/gpupool.h, gpupool.pc, plot-trace, the licence"
if [[ -e /etc/debian_version ]] && command -v dpkg-architecture >/dev/null; then
	multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
	[[ $libdir == lib/$multiarch ]] || fail "on Debian the libdir is $libdir, not lib/$multiarch"
	ok "the library goes in the multiarch folder lib/$multiarch"
fi
pc=$tmp/prefix/$libdir/pkgconfig/gpupool.pc
! grep -q '\.\.' "$pc" || fail "gpupool.pc has .. in it: $(grep -F .. "$pc")"
grep -qx "prefix=$tmp/prefix" "$pc" || fail "gpupool.pc does not name the prefix: $(grep ^prefix= "$pc")"
ok "gpupool.pc names the prefix, no .. in its paths"
if command -v pkg-config >/dev/null; then
	preload=$(PKG_CONFIG_PATH=$tmp/prefix/$libdir/pkgconfig pkg-config --variable=preload gpupool)
	cflags=$(PKG_CONFIG_PATH=$tmp/prefix/$libdir/pkgconfig pkg-config --cflags gpupool | tr -d " ")
	[[ $(realpath "$preload") == "$(realpath "$tmp/prefix/$libdir/libgpupool.so")" ]] ||
		fail "pkg-config's preload is $preload"
	[[ -e ${cflags#-I}/gpupool.h ]] || fail "pkg-config --cflags gives $cflags"
	ok "pkg-config gpupool: preload=$preload, $cflags"
fi
if [[ -z $sanitize ]]; then # an instrumented library cannot be preloaded into plain sh
	out=$("$tmp/prefix/bin/gpupool" run -- sh -c 'echo "$LD_PRELOAD"') || fail "installed gpupool run failed"
	[[ $(realpath "$out") == "$(realpath "$tmp/prefix/$libdir/libgpupool.so")" ]] ||
		fail "the installed gpupool run preloads $out"
	ok "the installed gpupool run preloads the installed library"
fi
"$tmp/prefix/bin/gpupool" --help | grep -q GPUPOOL_MAX_CACHED || fail "gpupool --help"

(cd "$build" && "$cpack" -G DEB -B "$tmp/deb" >"$tmp/cpack.log" 2>&1) ||
	fail "cpack -G DEB failed: $(tail -20 "$tmp/cpack.log")"
deb=$(ls "$tmp"/deb/*.deb 2>/dev/null | head -1)
[[ -n $deb ]] || fail "cpack wrote no .deb"
ok "cpack -G DEB: $(basename "$deb")"
if command -v dpkg-deb >/dev/null; then
	files=$(dpkg-deb -c "$deb")
	for f in ./usr/bin/gpupool /libgpupool.so ./usr/include/gpupool.h /pkgconfig/gpupool.pc \
		./usr/share/doc/gpupool/copyright; do
		grep -qF "$f" <<<"$files" || fail "the package lacks $f: $files"
	done
	[[ $(dpkg-deb -f "$deb" Package) == gpupool ]] || fail "the package is not named gpupool"
	ok "dpkg-deb: package gpupool with the command, the library, the header and gpupool.pc"
	dpkg-deb -x "$deb" "$tmp/x" || fail "dpkg-deb -x"
	grep -qF "./usr/$libdir/libgpupool.so" <<<"$files" || fail "the package's library is not in /usr/$libdir"
	# Stripped: no symbol table (.symtab), the dynamic one only.
	if command -v readelf >/dev/null; then
		! readelf -S "$tmp/x/usr/$libdir/libgpupool.so" | grep -q '\.symtab' ||
			fail "the package's library is not stripped"
		ok "the package's library is stripped"
	fi
	grep -qx "prefix=/usr" "$tmp/x/usr/$libdir/pkgconfig/gpupool.pc" ||
		fail "the package's gpupool.pc does not name /usr"
	ok "the package's library in /usr/$libdir, its gpupool.pc naming /usr"
fi
echo "PASS package_install"
