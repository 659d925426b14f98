#!/usr/bin/env bash
# Builds the CRI tests' images from Debian's busybox-static (no registry is reachable from the
# test machines) and imports them into a containerd with `ctr -n k8s.io images import`.
#
# usage: test/images/make-test-images.sh <containerd socket> [work dir]
#
# Each image is an OCI image layout (oci-layout, index.json, blobs/sha256/...) with one layer:
# /bin/busybox with its applet links in /bin, /etc/passwd and /etc/group (root, and user 1000
# "nonroot"), /tmp. The images:
#   nodeagent.test/busybox:1          Cmd ["sh"], runs as root (no User)
#   nodeagent.test/busybox-nonroot:1  the same with User "1000" (for runAsNonRoot checks)
#   nodeagent.test/pause:1            Entrypoint sleep: the CRI sandbox image of the test
#                                     containerd (containerd kills sandboxes with SIGKILL)
# The layer is built reproducibly (sorted names, mtime 0, root owner, gzip -n), so the same
# busybox gives the same image IDs. Writes only under the work dir (a temp dir by default,
# removed at the end).
set -euo pipefail

socket=${1:?usage: make-test-images.sh <containerd socket> [work dir]}
busybox=/bin/busybox
[[ -x $busybox ]] || { echo "make-test-images: no $busybox (install busybox-static)" >&2; exit 1; }
if [[ -n ${2:-} ]]; then
  work=$2
  mkdir -p "$work"
else
  work=$(mktemp -d "${TMPDIR:-/tmp}/nodeagent-images-XXXXXX")
  trap 'rm -rf "$work"' EXIT
fi
arch=$(dpkg --print-architecture)

sha256() { sha256sum "$1" | cut -d' ' -f1; }

# Writes $2 to the blob store of layout $1; prints its digest.
put_blob() {
  local layout=$1 file=$2 digest
  digest=$(sha256 "$file")
  mkdir -p "$layout/blobs/sha256"
  cp "$file" "$layout/blobs/sha256/$digest"
  echo "$digest"
}

make_layer() {
  local root=$work/rootfs
  rm -rf "$root"
  mkdir -p "$root/bin" "$root/etc" "$root/tmp" "$root/root" "$root/home/nonroot"
  chmod 1777 "$root/tmp"
  cp "$busybox" "$root/bin/busybox"
  local applet
  for applet in $("$busybox" --list); do
    [[ $applet == busybox ]] || ln -sf busybox "$root/bin/$applet"
  done
  printf 'root:x:0:0:root:/root:/bin/sh\nnonroot:x:1000:1000:nonroot:/home/nonroot:/bin/sh\n' \
    >"$root/etc/passwd"
  printf 'root:x:0:\nnonroot:x:1000:\n' >"$root/etc/group"
  chown 1000:1000 "$root/home/nonroot"
  tar --sort=name --mtime=@0 --numeric-owner --owner=0 --group=0 --pax-option=delete=atime,delete=ctime \
    -C "$root" -cf "$work/layer.tar" .
  gzip -n -c "$work/layer.tar" >"$work/layer.tar.gz"
}

# make_image <name> <config "config" object as JSON>: an OCI layout tar at $work/<file>.tar.
make_image() {
  local name=$1 config=$2 layout=$work/layout
  rm -rf "$layout"
  mkdir -p "$layout"
  local diff_id layer_digest config_digest manifest_digest
  diff_id=$(sha256 "$work/layer.tar")
  layer_digest=$(put_blob "$layout" "$work/layer.tar.gz")
  printf '{"architecture":"%s","os":"linux","config":%s,"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' \
    "$arch" "$config" "$diff_id" >"$work/config.json"
  config_digest=$(put_blob "$layout" "$work/config.json")
  printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%d},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"sha256:%s","size":%d}]}' \
    "$config_digest" "$(stat -c %s "$work/config.json")" "$layer_digest" \
    "$(stat -c %s "$work/layer.tar.gz")" >"$work/manifest.json"
  manifest_digest=$(put_blob "$layout" "$work/manifest.json")
  printf '{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%d,"annotations":{"io.containerd.image.name":"%s","org.opencontainers.image.ref.name":"%s"}}]}' \
    "$manifest_digest" "$(stat -c %s "$work/manifest.json")" "$name" "${name##*:}" >"$layout/index.json"
  echo '{"imageLayoutVersion":"1.0.0"}' >"$layout/oci-layout"
  local file=${name//[\/:]/_}.tar
  tar --sort=name --mtime=@0 --numeric-owner --owner=0 --group=0 -C "$layout" -cf "$work/$file" .
  ctr --address "$socket" --namespace k8s.io images import "$work/$file" >/dev/null
  echo "make-test-images: imported $name" >&2
}

path_env='"Env":["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]'
make_layer
make_image nodeagent.test/busybox:1 "{$path_env,\"Cmd\":[\"sh\"]}"
make_image nodeagent.test/busybox-nonroot:1 "{$path_env,\"Cmd\":[\"sh\"],\"User\":\"1000\"}"
make_image nodeagent.test/pause:1 "{$path_env,\"Entrypoint\":[\"/bin/sleep\",\"2147483647\"]}"
