#pragma once
/// \file oci.hpp
/// A kernel cache as an OCI image, so that registries, Kubernetes, skopeo, umoci and cosign move
/// and sign it like any other image. Written as an OCI image layout (image-layout 1.0.0) in a
/// folder:
///
///   <dir>/oci-layout               {"imageLayoutVersion":"1.0.0"}
///   <dir>/index.json               an image index: one manifest descriptor per tag, its tag in
///                                  the annotation org.opencontainers.image.ref.name
///   <dir>/blobs/sha256/<hex>       every blob, named by the SHA-256 of its bytes
///
/// An export writes one image (manifest, config, layers) and adds it to index.json under its
/// tag, replacing an image of the same tag and keeping the others (as `skopeo copy` into an
/// existing layout does). Blobs no tag uses any more are left where they are.
///
/// Layers. Each layer is an uncompressed tar (application/vnd.oci.image.layer.v1.tar) whose files
/// sit where a cache root keeps them, so the image's root file system, unpacked or mounted, is a
/// ready cache folder (KJIT_CACHE_DIR) as well as something `kjit cache import --oci` checks:
///
///   v1/<ab>/<32 hex>.kjit                 an entry, byte for byte as stored (entry.hpp)
///   tuning/<fingerprint id>.json          a tuning table, as stored (tune_table.hpp)
///   signatures/<path of a file>.sig       that file's detached Ed25519 signature, when the
///                                         export was signed (remote/record.hpp: an entry is
///                                         signed as a fleet-tier record of its key, a table as
///                                         the record remote/tune_share.hpp keys it under)
///
/// One layer per group of entries that share a target and a toolkit (NVRTC and CUDA headers
/// versions), in that order, then one per tuning table, by fingerprint id: an image for two
/// targets shares the layer of each with every other image that carries it. Each layer's
/// descriptor names its group in annotations: dev.kjit.target, dev.kjit.nvrtc-version,
/// dev.kjit.cuda-headers-version and dev.kjit.entries for entries, dev.kjit.fingerprint for a
/// table. (A push to a registry that compresses the layers, as `skopeo copy` does, writes new
/// layer descriptors without these; the manifest's annotations and the config's labels stay.)
///
/// Manifest annotations, copied as the config's Labels (what `skopeo inspect` prints):
///   dev.kjit.version                the kjit that wrote the image
///   dev.kjit.entries                how many entries it holds
///   dev.kjit.targets                their targets, sorted, comma-separated ("sm_89,sm_90a")
///   dev.kjit.nvrtc-versions         their NVRTC versions, likewise ("13.0")
///   dev.kjit.cuda-headers-versions  their CUDA headers versions, likewise ("13000")
///   dev.kjit.fingerprints           the device fingerprint ids of its tuning tables, likewise
///   dev.kjit.signer                 the signing key's id (16 hex digits), only when signed
///
/// The config is an OCI image config (application/vnd.oci.image.config.v1+json) with the
/// platform (os, architecture: the exporting host's unless given), rootfs.diff_ids and the
/// labels; nothing to run.
///
/// Reproducible: the same entries, tables, filter, tag, platform and key give the same bytes and
/// digests. Entries are sorted by key; tar members carry mtime 0, uid and gid 0, no user or group
/// names and mode 0644 (folders 0755); the JSON has sorted keys, no whitespace and no time.
///
/// Import checks everything before it publishes anything: every blob's size and SHA-256 against
/// its descriptor, each layer's uncompressed SHA-256 against the config's diff_id (a registry may
/// have compressed the layers: gzip and zstd layers are read too), that each layer holds only
/// regular files and folders at the paths above, each entry as remote/record.hpp checks a record
/// (checksum, the key its path names) and, when trusted keys are given, its signature, and each
/// tuning table's signature and contents alike. Any failure refuses the whole image.

#include "cache/remote/signing.hpp"
#include "cache/shipping.hpp"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kjit::cache {

class DiskCache;

/// "sha256:<64 hex digits>" of `bytes`: the digest a layout names a blob by (libsodium).
std::string oci_digest(std::string_view bytes);

/// Where an image is: a layout folder and a tag ("" = the only image the layout holds).
struct OciRef {
  std::string dir;
  std::string tag;
};

/// Parses "oci:DIR[:TAG]" (as skopeo names a layout: DIR holds no ':') or a plain DIR (tag "").
/// Throws InvalidArgument naming `text` for an empty folder or tag, or a tag that is not one
/// ([A-Za-z0-9_][A-Za-z0-9._-]{0,127}).
OciRef parse_oci_ref(const std::string& text);

/// How export_oci() writes the image.
struct OciExportOptions {
  std::string tag = "latest";
  /// Signs every entry and table (dev.kjit.signer names the key); null: unsigned.
  const remote::SecretKey* signer = nullptr;
  std::string os = "linux";
  /// The GOARCH name of the platform ("amd64", "arm64"); "" = this host's.
  std::string architecture;
};

/// What export_oci() wrote.
struct OciExportReport {
  uint64_t entries = 0;
  uint64_t tables = 0;
  uint64_t layers = 0;
  uint64_t skipped_bad = 0;     ///< entries left out because they do not decode
  uint64_t skipped_tables = 0;  ///< tuning tables left out (ExportSet::skipped_tables)
  uint64_t bytes = 0;           ///< the image's blobs: layers, config and manifest
  std::string manifest_digest;  ///< "sha256:<hex>": what a registry names the image by
  std::string tag;
};

/// Writes what collect_export() takes from `cache` with `filter` as one image into the layout
/// at `dir` (created when missing), tagged `options.tag`. Throws InvalidArgument for a bad tag
/// or platform, CacheError naming the path when `dir` holds files but no OCI image layout, when
/// its index.json does not parse, or when a file cannot be written. index.json is written last
/// (atomically), so a failed export leaves the layout's tags as they were.
OciExportReport export_oci(const DiskCache& cache, const std::string& dir, const ExportFilter& filter,
                           const OciExportOptions& options);

/// How import_oci() checks an image.
struct OciImportOptions {
  /// When not empty, every entry and table must carry a valid signature by one of these keys.
  std::vector<remote::PublicKey> trusted;
};

/// Checks the image `ref` names (header comment: every blob, layer, entry, table and, with
/// trusted keys, signature), then adds its entries and tables to `cache` by publish_shipped.
/// Throws, with nothing imported: InvalidArgument naming the file when the layout's files cannot
/// be read (read_input_file), CacheError naming the layout and what failed ("blob sha256:… of
/// layer 2: digest mismatch", "v1/ab/….kjit in layer 1: signed by an untrusted key") for
/// anything else, and when there is no image of the tag (or no tag is given and the layout holds
/// several).
ImportReport import_oci(DiskCache& cache, const OciRef& ref, const OciImportOptions& options);

}  // namespace kjit::cache
