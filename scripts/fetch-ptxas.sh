#!/usr/bin/env bash
# fetch-ptxas.sh: NVIDIA's PTX assembler and SASS tools (ptxas, cuobjdump,
# nvdisasm) from Debian's non-free archive, unpacked into a cache folder. No
# CUDA installation and no GPU are needed; nothing is installed system-wide.
#
# Usage: scripts/fetch-ptxas.sh
#
# On success it prints, on stdout, lines for eval:
#
#   ATTNC_PTXAS=<dir>/bin/ptxas
#   ATTNC_CUOBJDUMP=<dir>/bin/cuobjdump
#   ATTNC_NVDISASM=<dir>/bin/nvdisasm
#
# and exits 0; progress goes to stderr. Any failure exits nonzero with
# "fetch-ptxas: error: ...". Running it again when the tools are already
# there only prints the lines (idempotent).
#
# <dir> is $ATTNC_CUDA_TOOLS_DIR, else ${XDG_CACHE_HOME:-$HOME/.cache}/attnc/cuda-tools,
# which is where the attnc tests look (codegen/cuda/sass.FindTools).
#
# How: the tools are in the package nvidia-cuda-toolkit (bookworm: CUDA 11.8,
# 84 MB; its dependencies are not needed for these three statically linked
# programs). apt-get runs with a private configuration under <dir>/apt: one
# sources file that adds the components contrib and non-free to this
# machine's own Debian mirror and suite (read from its apt sources, with the
# same keyring), its own package lists and cache, so the system's apt state
# is not touched. `apt-get download` fetches the .deb and `dpkg-deb
# --fsys-tarfile` unpacks the three programs; the .deb is then deleted.
set -euo pipefail

die() {
	echo "fetch-ptxas: error: $*" >&2
	exit 1
}
say() { echo "fetch-ptxas: $*" >&2; }

pkg=nvidia-cuda-toolkit
tools=(ptxas cuobjdump nvdisasm)

cache=${XDG_CACHE_HOME:-${HOME:?HOME is not set}/.cache}
dir=${ATTNC_CUDA_TOOLS_DIR:-$cache/attnc/cuda-tools}

print_paths() {
	echo "ATTNC_PTXAS=$dir/bin/ptxas"
	echo "ATTNC_CUOBJDUMP=$dir/bin/cuobjdump"
	echo "ATTNC_NVDISASM=$dir/bin/nvdisasm"
}

# have_tools: every tool is there and runs.
have_tools() {
	local t
	for t in "${tools[@]}"; do
		[[ -x $dir/bin/$t ]] || return 1
		"$dir/bin/$t" --version >/dev/null 2>&1 || return 1
	done
}

if have_tools; then
	say "already in $dir ($(cat "$dir/VERSION" 2>/dev/null || echo "unknown version"))"
	print_paths
	exit 0
fi

command -v apt-get >/dev/null 2>&1 || die "apt-get not found: this script needs a Debian-based system (or put ptxas/cuobjdump from CUDA >= 11.8 on PATH, or set ATTNC_PTXAS and ATTNC_CUOBJDUMP)"
command -v dpkg-deb >/dev/null 2>&1 || die "dpkg-deb not found"
command -v tar >/dev/null 2>&1 || die "tar not found"

codename=
if [[ -r /etc/os-release ]]; then
	codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
fi
[[ -n $codename ]] || die "no VERSION_CODENAME in /etc/os-release: cannot tell which Debian suite to use"

# debian_source: "URI KEYRING" of the first apt source serving suite
# $codename (deb822 .sources files and one-line .list files).
debian_source() {
	local files=()
	[[ -f /etc/apt/sources.list ]] && files+=(/etc/apt/sources.list)
	local f
	for f in /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
		[[ -f $f ]] && files+=("$f")
	done
	((${#files[@]} > 0)) || return 1
	awk -v suite="$codename" '
		function flush() {
			if (types ~ /(^|[ \t])deb([ \t]|$)/ && (" " suites " ") ~ (" " suite " ") && uris != "" && !found) {
				split(uris, u, /[ \t]+/)
				print u[1], (signed == "" ? "-" : signed)
				found = 1
			}
			types = ""; uris = ""; suites = ""; signed = ""
		}
		FNR == 1 { flush(); deb822 = (FILENAME ~ /\.sources$/) }
		deb822 {
			if ($0 ~ /^[ \t]*$/) { flush(); next }
			if ($0 ~ /^#/) next
			key = $0; sub(/:.*/, "", key); val = $0; sub(/^[^:]*:[ \t]*/, "", val)
			if (key == "Types") types = val
			else if (key == "URIs") uris = val
			else if (key == "Suites") suites = val
			else if (key == "Signed-By") signed = val
			next
		}
		/^[ \t]*deb[ \t]/ && !found {
			line = $0; sub(/^[ \t]*deb[ \t]+/, "", line)
			opts = ""
			if (line ~ /^\[/) { opts = line; sub(/\].*/, "", opts); sub(/^[^\]]*\][ \t]*/, "", line) }
			n = split(line, w, /[ \t]+/)
			if (n >= 2 && w[2] == suite) {
				s = ""
				if (match(opts, /signed-by=[^ \t\]]+/)) s = substr(opts, RSTART + 10, RLENGTH - 10)
				print w[1], (s == "" ? "-" : s)
				found = 1
			}
		}
		END { flush() }
	' "${files[@]}"
}

src=$(debian_source) || true
[[ -n $src ]] || die "no apt source for Debian suite '$codename' in /etc/apt/sources.list or /etc/apt/sources.list.d/"
uri=${src%% *}
keyring=${src#* }
if [[ $keyring == - ]]; then
	keyring=/usr/share/keyrings/debian-archive-keyring.gpg
fi
[[ -f $keyring ]] || die "apt keyring $keyring not found (Signed-By of the suite '$codename' source)"

mkdir -p "$dir" || die "cannot create $dir"
apt_dir=$dir/apt
mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$apt_dir/sources.list.d" ||
	die "cannot create $apt_dir"
# The one sources file: this machine's Debian mirror and suite, the two
# components that hold NVIDIA's redistributable tools.
echo "deb [signed-by=$keyring] $uri $codename contrib non-free" >"$apt_dir/sources.list"

apt_opts=(
	-o "Dir::Etc::SourceList=$apt_dir/sources.list"
	-o "Dir::Etc::SourceParts=$apt_dir/sources.list.d"
	-o "Dir::State::Lists=$apt_dir/lists"
	-o "Dir::Cache=$apt_dir/cache"
)
# As root apt downloads as the user _apt, who cannot write into a private
# cache folder; download as root instead (apt would only warn).
if [[ $(id -u) -eq 0 ]]; then
	apt_opts+=(-o "APT::Sandbox::User=root")
fi

say "apt-get update (private lists: $codename contrib non-free)"
apt-get "${apt_opts[@]}" -q update >&2 || die "apt-get update of $uri $codename contrib non-free failed"

work=$(mktemp -d "$dir/.fetch.XXXXXX") || die "cannot create a temporary folder in $dir"
trap 'rm -rf "$work"' EXIT

say "apt-get download $pkg"
(cd "$work" && apt-get "${apt_opts[@]}" -q download "$pkg" >&2) ||
	die "apt-get download $pkg failed (is it in $codename non-free for $(dpkg --print-architecture 2>/dev/null || uname -m)?)"
deb=$(compgen -G "$work/${pkg}_*.deb" | head -n1) || true
[[ -n $deb && -f $deb ]] || die "apt-get download left no $pkg .deb in $work"
version=$(dpkg-deb -f "$deb" Version) || die "cannot read the version of $deb"

members=()
for t in "${tools[@]}"; do
	members+=("./usr/bin/$t")
done
mkdir -p "$work/x"
dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$work/x" "${members[@]}" ||
	die "$deb does not hold ${members[*]}"
rm -f "$deb"

# Replace bin/ in one rename, so that a concurrent reader sees the old or
# the new folder, never half of one.
mkdir -p "$work/bin"
for t in "${tools[@]}"; do
	mv "$work/x/usr/bin/$t" "$work/bin/$t"
	"$work/bin/$t" --version >/dev/null 2>&1 || die "$t from $pkg $version does not run here"
done
rm -rf "$dir/bin.old"
if [[ -e $dir/bin ]]; then
	mv "$dir/bin" "$dir/bin.old"
fi
mv "$work/bin" "$dir/bin"
rm -rf "$dir/bin.old"
echo "$pkg $version" >"$dir/VERSION"

have_tools || die "the tools in $dir/bin do not run"
say "$pkg $version: $("$dir/bin/ptxas" --version | grep -m1 -o 'release [0-9.]*, V[0-9.]*') in $dir/bin"
print_paths
