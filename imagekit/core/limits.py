"""Every bound imagekit puts on its input, in one place, each with the reason for its value.

Files and flags come from people and from other tools (CI artifacts, bake, an edited report);
none is trusted to be small. Each bound is checked before the work it protects: a file's size
before it is read, YAML nesting while it is composed, a matrix's size from its axis lengths before
a single combination is made. The distribution spec's own limits on names (a tag's 128
characters, a reference's 255) live with the names, in ``imagekit.core.naming``.
"""

from __future__ import annotations

# -- the matrix file ---------------------------------------------------------------------------------

MATRIX_BYTES = 1_000_000  # a real matrix is a few kilobytes
YAML_NODES = 200_000  # values after alias expansion; a real matrix holds a few hundred
YAML_DEPTH = 64  # nesting; a matrix nests four levels deep
TEMPLATE_BYTES = 1_000_000  # one Jinja template; imagekit's own templates total under 5 kB
# A local base's Dockerfile (bases.NAME.build), read for its FROM lines: a hand-written one is a few
# kB, and BuildKit's own parser is no place for a megabyte of Dockerfile either.
DOCKERFILE_BYTES = 1_000_000
# A `--secret ID=FILE` file: one index token (at most 4,096 characters, what a netrc token may be:
# imagekit.builds.backends.buildkit) and the white space around it; a larger file holds no token.
SECRET_FILE_BYTES = 64 << 10

# -- the matrix's checkout ------------------------------------------------------------------------------

# One `git` query of the matrix's checkout (HEAD's commit and time, whether tracked files differ, the
# origin's URL), for an image's created, revision and source labels: each answers in milliseconds on
# a large repository; one that has not answered in this long (a hung network file system, a lock)
# leaves the labels out rather than hold the build.
GIT_QUERY_DEADLINE_S = 10.0
# What one such answer may hold: a commit line, a URL, a page of `git status`: past it the tree is
# taken as changed (revision left out) and nothing more is read.
GIT_ANSWER_BYTES = 1 << 20
# The earliest SOURCE_DATE_EPOCH a build takes: zip and wheel tools refuse file times before 1980.
EARLIEST_EPOCH = 315_532_800  # 1980-01-01T00:00:00Z

# -- the plan ----------------------------------------------------------------------------------------

# Combinations a matrix may ask for (the product of its axis lengths plus its include entries):
# the plan-and-render benchmark's size, which plans and renders in under 2 s. Each cell is an
# image of several GB; more than this is a typo or an attack, and is refused before expanding.
MAX_COMBINATIONS = 10_000
# include/exclude entries are each compared with every combination: combinations x entries.
MAX_EXPANSION_STEPS = 1_000_000
# Warnings of one kind printed before the rest are counted in one line.
WARNINGS_SHOWN = 5

# -- strings ----------------------------------------------------------------------------------------

VERSION_CHARS = 64  # "2.1.0a0+32f93b1" is 15
VERSION_COMPONENT_DIGITS = 9  # keeps int() far from Python's 4,300-digit conversion limit
VALUE_CHARS = 4_096  # an ENV value or a build argument
PACKAGE_CHARS = 256  # a pip requirement or a Debian package with its version
URL_CHARS = 2_048  # what browsers and most servers accept
NAME_CHARS = 255  # host names (253), repository paths and patterns of them
PATH_CHARS = 1_024  # a path the matrix names, relative to the matrix file
SECRET_ID_CHARS = 41  # a build secret's id: a short name, also an env variable's suffix
LOGIN_CHARS = 128  # an index login (a user name, an e-mail address, `__token__`)
# An index secret's shortest value. Every secret value imagekit reads is masked wherever imagekit
# prints or writes it (``imagekit.core.secret_values``), inside any word: a shorter one would eat
# ordinary words of a build's output ('pass' in 'password'). NIST SP 800-63B asks 8 characters of a
# password; index tokens (Artifactory, GitLab, devpi, PyPI's) are 20 and more.
SECRET_MIN_CHARS = 8
FILE_NAME_BYTES = 255  # one path component (NAME_MAX on Linux)
PATH_BYTES = 4_096  # a whole path (PATH_MAX on Linux)
PORT_MAX = 65_535

# -- flags -------------------------------------------------------------------------------------------

# A week: past it a timeout is a typo, and 1e308 would overflow the socket timeouts it reaches.
MAX_TIMEOUT_S = 7 * 24 * 3600
# The Kubernetes Job API's int32 fields (backoffLimit; activeDeadlineSeconds is bounded alike).
MAX_INT32 = 2**31 - 1
# Images one `imagekit k8s --prepull` DaemonSet pulls onto each node of an architecture: each is
# several GB, and the kubelet cannot garbage-collect them while the pod holds their containers, so
# past a few dozen the node's disk fills and it evicts workloads. The shipped matrix has 19 amd64
# cells; hundreds of init containers are a missing --only.
MAX_PREPULL_IMAGES = 32
# Nodes (one pod each) of one `imagekit k8s --compute-domain` Job: the nodes of one multi-node
# NVLink domain. NVIDIA's DRA driver caps an IMEX domain at maxNodesPerIMEXDomain, default 18 ("On
# GB200 and GB300 the limit is 18": an NVL72 rack's 18 compute trays of 4 GPUs;
# kubernetes-sigs/dra-driver-nvidia-gpu v0.4.0, cmd/compute-domain-controller/main.go); a daemon
# past it gets no place in its clique. The CRD's numNodes has no maximum of its own.
MAX_COMPUTE_DOMAIN_NODES = 18

# -- state files: report.json, images.lock.json, bake metadata ---------------------------------------

# How far past this machine's clock a recorded time may lie (a verification's verified_at, a
# report's start, a lock's publication): NTP keeps machines within a second, a CI runner or a
# cluster node out of sync for a while is off by a minute or two. Past this, a time has not come
# yet: a forged or broken record, which would otherwise pass any --max-age for years.
CLOCK_SKEW_S = 5 * 60

# A verified cell's record is about 50 kB (its checks' details); 128 MiB holds a few thousand.
STATE_BYTES = 128 << 20
MAX_RECORDS = 100_000  # cells (or bases, or lock entries) in one state file
TEXT_CHARS = 65_536  # one free-text value: an error, a log line, a check's detail
SHORT_CHARS = 1_024  # a name, a timestamp, a path, a metric's key
MAX_ITEMS = 1_000  # a record's checks, tags, log lines or metrics
MAX_GPUS = 64  # GPUs one verification reports figures for; a node holds 8 or 16
# A --gpus value as given and recorded: 16 CDI device names by UUID (nvidia.com/gpu=GPU-<36>, 55
# characters) fit; device=IDS and counts are far shorter.
GPUS_TEXT_CHARS = 1_024
# An engine's CDI spec directories looked through for NVIDIA's spec (only to say what to pass
# instead of --gpus all): a node has one spec per vendor, a few at most; `kind` is among a spec's
# first lines (nvidia-ctk writes cdiVersion, then kind).
MAX_CDI_SPEC_FILES = 64
CDI_SPEC_HEAD_BYTES = 4_096
# A whole CDI spec, read for its device names (imagekit.verify.cdi_specs): nvidia-ctk's for a node
# of 8 GPUs with every MIG device named two ways is some hundred kilobytes; the bounded YAML
# reader it is parsed by takes no more than a matrix's bytes either.
CDI_SPEC_BYTES = MATRIX_BYTES
# One Job's output as `kubectl logs` prints it: the probe's document is a few hundred kilobytes
# (its inventory lists every package), after the entrypoint's banner and the libraries' warnings.
JOB_OUTPUT_BYTES = 16 << 20
# `kubectl get jobs,pods -o json` of one validate-on round (`imagekit k8s-results --status`): a Job's
# object is about 5 kB and a pod's 10 kB; a few hundred Jobs with a few retried pods each are a few
# MB. JSON is read whole, so this also bounds the memory its objects take (ten times the bytes).
K8S_STATUS_BYTES = 32 << 20

# -- caches imagekit keeps for itself -----------------------------------------------------------------

# A cached wheel closure: a list of wheel paths (a CUDA torch closure names about 25 wheels).
CLOSURE_CACHE_BYTES = 1_000_000
# The state directory's file-hash cache: one entry (path, stat, sha256) is ~200 bytes; MAX_RECORDS
# of them fit.
HASH_CACHE_BYTES = 32 << 20

# -- registry answers ---------------------------------------------------------------------------------

# A registry is a server on the network, trusted no more than a file: every body read from it has
# a bound, checked while it is read (never after), and every operation a deadline, so that an
# endless or drip-fed answer ends in one line, not in a MemoryError, a hang or a full disk.

# The OCI distribution spec asks registries to accept manifests of at least 4 MiB; a larger one
# would not be portable to every registry, and imagekit's own are a few kilobytes.
MANIFEST_BYTES = 4 << 20
# An image config (labels, env, history): a CUDA image's is about 20 kB.
CONFIG_BYTES = 8 << 20
# A token service's JSON answer: a JWT with a few scopes is a few kilobytes.
TOKEN_BYTES = 1 << 20
# An error body: 200 characters of it reach the error line; the rest is not read.
REGISTRY_ERROR_BYTES = 64 << 10
# One page of the tag list: 100,000 tags of 128 characters (a registry may ignore ``n``).
TAGS_PAGE_BYTES = 16 << 20
# Pages of tags followed (``Link: <...>; rel="next"``): 1,000 pages of 1,000 tags.
TAG_PAGES = 1_000
# A WWW-Authenticate challenge: a realm URL, a service and a scope take a few hundred characters.
CHALLENGE_CHARS = 4_096
# Redirects followed for one GET or HEAD (the registry to its blob storage is one; a CDN two).
REDIRECTS = 5
# Images one index (manifest list) may name to be promoted: each is a manifest fetch and its
# blobs' mounts. imagekit's own indexes name one image per platform (a handful); a multi-arch
# public image names about 10, twice that with attestation manifests. Thousands are an attack.
MAX_INDEX_MANIFESTS = 256
# Layers one image manifest may name for its pull cost to be counted: overlay2 stacks at most 128
# lower directories (moby refuses images deeper than 125 layers), so every image an engine can run
# has fewer; a 4 MiB manifest could name some 20,000 descriptors, each a line of every report.
MAX_IMAGE_LAYERS = 1_000
# One layer's (or config's) size as a manifest states it: the largest CUDA layers are ~5 GB and a
# node's disk a few TB; past 1 TiB a size is a broken or hostile manifest, never a layer to pull.
LAYER_BYTES_MAX = 1 << 40
# The default publish.max_layer_size: Azure ML splits its torch installs to keep each layer under
# 8 GB, and AWS's 13.5 GB inference image hit SageMaker's 10 GiB limit.
DEFAULT_MAX_LAYER_BYTES = 8 << 30
# The Dockerfile step (history's created_by) a report shows for a cell's largest layer, clipped.
STEP_CHARS = 200
# A blob copied through imagekit whose manifest gives no size: the largest CUDA layers are ~5 GB.
BLOB_BYTES = 64 << 30
# `rebuild-check` lists the entries of the first differing layer, the published blob's and the
# rebuilt one's, streaming each (a torch layer is ~200,000 entries and ~5 GB unpacked): at most
# this many entries of each (~300 bytes a summary kept to compare) and this many unpacked bytes
# read (content hashed, or skipped past); a hostile tar's absurd sizes or endless entries stop the
# listing with a note, never the check.
REBUILD_TAR_ENTRIES = 500_000
REBUILD_TAR_BYTES = 32 << 30
# What one tar header may take (tarfile reads a pax header or a GNU long name whole into memory):
# a path is at most 4 KiB and a pax record set a few; 16 MiB is far past any real one.
REBUILD_TAR_HEADER_BYTES = 16 << 20
# Differing entries a verdict shows: the first few tell which step's output moved.
REBUILD_SHOWN_ENTRIES = 10
# $DOCKER_CONFIG/config.json: a few logins take a few kilobytes.
DOCKER_CONFIG_BYTES = 1 << 20  # read by imagekit (registry logins) and, once checked, by docker-py
# One registry operation whose answer is small, retries included: a ping, a manifest GET, HEAD
# or PUT, a token, a page of tags, the referrers, an image config, a small blob's upload, a mount
# (no bytes move). A healthy registry answers each in well under a second; five attempts that
# fail at once and their 7.5 s of backoff fit, and one 30 s silence (a read's own timeout) ends
# it. A manifest or token dripped a byte at a time holds a publish this long per operation, not
# ten minutes. IMAGEKIT_REGISTRY_DEADLINE_S sets it (``imagekit.registry.transport``) for a
# registry that is slower than that and still honest.
REGISTRY_DEADLINE_S = 30.0
# Copying one blob through imagekit (only where the registry declines a mount), or reading a
# layer (rebuild-check): 64 GiB at 3 MB/s. Only these keep a deadline this long; a token fetched
# on the way still gets REGISTRY_DEADLINE_S.
BLOB_COPY_DEADLINE_S = 6 * 3600.0

# -- the Docker engine's answers ------------------------------------------------------------------------

# DOCKER_HOST may name any server; like a registry, it is trusted no further than its answers'
# bounds. An answer to a call that is not a stream (inspect, tag, remove, a listing of some
# thousands of images) is whole in under a second on a healthy engine; builds, pulls, pushes and
# logs stream, and are bounded by their own timeouts instead.
ENGINE_ANSWER_BYTES = 64 << 20
# One such call, its headers and whole body: twice docker-py's 60 s per-read timeout, so a slow
# but honest engine is never cut, and an answer dripped a byte at a time ends here. A call that
# sets a longer timeout of its own (a check container's `wait`, bounded by --verify-timeout) gets
# that timeout and then this deadline.
ENGINE_CALL_DEADLINE_S = 120.0
# How long the engine may stay silent while it loads a built image (`POST /images/load`): it answers
# only once it has read the whole OCI archive and unpacked every layer into its store. docker-py's
# 60 s per-read timeout cut the load of a 3 GB CUDA-wheel cell on a 2-CPU machine (measured: no
# byte within 60 s), so `imagekit build --push` of a real CUDA cell failed; an hour covers a
# 20 GB image on a slow disk, and still ends a load from an engine that hangs.
ENGINE_LOAD_SILENCE_S = 3600.0
# A `docker buildx version|inspect` answer: local, or one round trip to a remote builder. A builder
# that has not answered in this long is down (a remote one behind a dead network path).
BUILDX_QUERY_DEADLINE_S = 60.0
# One progress object of `docker buildx build --progress rawjson`: BuildKit sends a step's output in
# chunks of a few kilobytes, batched about every 100 ms; past this it is not buildx talking.
BUILDX_EVENT_BYTES = 16 << 20
# One line of a build's streamed output, held until its end comes: a secret value a step prints is
# masked on whole lines, never on the chunks the engine happens to send (a value split over two
# would pass). Past this a line is handed on in pieces, each cut where no secret's form spans the
# cut. pip's and apt's lines are under 1 kB; 64 kB without a newline is a progress bar.
STREAM_LINE_CHARS = 65_536

# -- attestations and SBOMs ---------------------------------------------------------------------------

# A PEM private or public key: an ECDSA P-256 key is about 250 bytes, an RSA-4096 one 3.3 kB; a
# file far past that is no key (and must not be read whole from a FIFO or /dev/zero).
KEY_BYTES = 64 << 10
# One DSSE envelope read back from a registry: a verification predicate is a few kilobytes, an
# SBOM of a CUDA image (about 500 Debian and 200 Python packages) a few hundred, base64 included.
ENVELOPE_BYTES = 16 << 20
# Referrers of one image that are looked at (attestations, SBOMs, signatures from several runs):
# a nightly that attaches two a day reaches this in over a year; more is refused, not truncated.
MAX_REFERRERS = 1_000
# Sonames an image holds twice that a verification record lists (the probe lists at most 200, and
# the count stays whole): a CUDA devel base under torch's wheels holds about 15; and the paths kept
# per soname (the probe lists at most 8: a library is seldom in more than 3 places).
MAX_DUPLICATE_SONAMES = 200
MAX_DUPLICATE_PATHS = 8

# -- vulnerability scanners' findings (`imagekit publish --scan`) ----------------------------------------

# One scanner's JSON for one image, as `trivy image --format json` or `grype -o json` writes it:
# Trivy's of a Debian image with 6 findings is 10 kB (tests/fixtures/scans), a finding with its
# description and references about 2 kB, so MAX_SCAN_FINDINGS of them are some 40 MB; Trivy's
# --list-all-pkgs adds each package's installed files (a CUDA image: a few MB more). Past this a
# file is no scan of one image, and is refused by its size before it is read.
SCAN_BYTES = 64 << 20
# Findings one scan may hold: a CUDA devel image on Ubuntu 22.04 gets a few thousand (most of them
# low or negligible, in its ~500 Debian packages); 10^6 are a generated file, refused before one
# finding is looked at.
MAX_SCAN_FINDINGS = 20_000

# -- Kubernetes DRA -----------------------------------------------------------------------------------

# A GPU's product name as NVML reports it and NVIDIA's DRA driver publishes it (productName):
# NVML's own buffer for a device name is 96 bytes (NVML_DEVICE_NAME_V2_BUFFER_SIZE).
MAX_PRODUCT_NAME = 96
