"""`appliance bundle lock|build|keygen|sign|verify|inspect|import-runai`: argument parsing and rendering
only; the work is in appliance_cli.bundle (which never prints)."""

from __future__ import annotations

import argparse
from contextlib import contextmanager
from pathlib import Path

from rich.markup import escape
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TransferSpeedColumn,
)
from rich.table import Table

from appliance_cli.cli import ui
from appliance_cli.errors import UsageError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bundle", help="build, sign, verify and inspect the offline bundle")
    bsub = p.add_subparsers(dest="bundle_command", metavar="ACTION", required=True)

    lk = bsub.add_parser(
        "lock", help="resolve a profile's URLs, tags and packages into its lock (connected build host)"
    )
    lk.add_argument("--profile", required=True, help="profile name in bundles/profiles/ or a .yml path")
    lk.add_argument(
        "--update", nargs="+", default=[], metavar="NAME", help="resolve these entries again (default: none)"
    )
    lk.add_argument(
        "--check", action="store_true", help="resolve everything again and report drift; write nothing"
    )
    lk.add_argument(
        "--cache", type=Path, metavar="DIR", help="keep downloads here for `bundle build --cache DIR`"
    )
    _mirror_arg(lk)
    lk.set_defaults(handler=cmd_lock)

    b = bsub.add_parser("build", help="build a bundle directory from a profile (incremental, resumable)")
    b.add_argument(
        "--profile", required=True, help="profile name in bundles/profiles/ (e.g. lab) or a .yml path"
    )
    b.add_argument("--out", required=True, type=Path, metavar="DIR", help="bundle directory to create/update")
    b.add_argument("--cache", type=Path, metavar="DIR", help="download/build cache (default: next to --out)")
    b.add_argument(
        "--chunk-size", type=_size, metavar="BYTES", help="split files above this size (default 2G)"
    )
    b.add_argument("--no-fsync", action="store_true", help="skip fsync per blob (faster, less crash-safe)")
    _mirror_arg(b)
    b.set_defaults(handler=cmd_build)

    k = bsub.add_parser("keygen", help="create an Ed25519 signing key pair PREFIX.key (0600) + PREFIX.pub")
    k.add_argument("--out", required=True, metavar="PREFIX")
    k.add_argument("--force", action="store_true", help="overwrite existing key files")
    k.set_defaults(handler=cmd_keygen)

    s = bsub.add_parser("sign", help="sign DIR/manifest.json with a private key")
    s.add_argument("dir", type=Path)
    s.add_argument("--key", required=True, type=Path, help="private key (PREFIX.key)")
    s.set_defaults(handler=cmd_sign)

    v = bsub.add_parser("verify", help="check signature, completeness and every blob's hash")
    v.add_argument("dir", type=Path)
    v.add_argument(
        "--key", type=Path, help="trusted public key (PREFIX.pub); default $APPLIANCE_BUNDLE_PUBKEY"
    )
    v.add_argument("--jobs", type=int, metavar="N", help="hashing threads (default: CPU count)")
    v.add_argument("--require-signature", action="store_true", help="fail unless signed by the trusted key")
    v.set_defaults(handler=cmd_verify)

    i = bsub.add_parser(
        "inspect", help="list a bundle's artifacts and sizes, or check a profile holds every image pulled"
    )
    i.add_argument("dir", type=Path, nargs="?", help="the bundle directory (not with --check-complete)")
    i.add_argument("--all", action="store_true", help="list every artifact, not only a summary per kind")
    i.add_argument(
        "--check-complete",
        action="store_true",
        help="render every image the roles and charts pull and check the profile lists each, overridden "
        "to the private registry",
    )
    i.add_argument("--profile", help="with --check-complete: the profile (name or .yml path)")
    i.add_argument(
        "--charts", type=Path, metavar="DIR", help="with --check-complete: chart archives NAME-VERSION.tgz"
    )
    i.set_defaults(handler=cmd_inspect)

    r = bsub.add_parser("import-runai", help="add the vendor's air-gapped Run:ai tar to a bundle")
    r.add_argument("tar", type=Path, metavar="Run:ai-VERSION.tar")
    r.add_argument("--into", required=True, type=Path, metavar="DIR")
    r.set_defaults(handler=cmd_import_runai)


def _mirror_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--mirror",
        action="append",
        default=[],
        metavar="HOST=URL",
        help="fetch HOST's files or images from URL instead (repeatable; also $APPLIANCE_BUNDLE_MIRRORS); "
        "what is recorded keeps the upstream names",
    )


def _size(text: str) -> int:
    units = {"k": 1024, "m": 1024**2, "g": 1024**3}
    t = text.strip().lower().rstrip("ib")
    try:
        return int(float(t[:-1]) * units[t[-1]]) if t and t[-1] in units else int(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text}") from None


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return str(n)


@contextmanager
def _progress(what: str):
    """A rich bar with bytes and rate on a terminal; plain lines otherwise."""
    from appliance_cli.bundle import ProgressEvent

    if not ui.interactive():

        def plain(ev: ProgressEvent) -> None:
            if ev.kind == "note":
                ui.info(f"{ev.item}: {ev.message}")
            elif ev.kind == "end" and ev.item != "verify":
                ui.info(f"  done {ev.item}")

        yield plain
        return
    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeElapsedColumn(),
        console=ui.err,
        transient=True,
    )
    task = bar.add_task(what, total=None)

    def render(ev: ProgressEvent) -> None:
        if ev.kind == "advance":
            bar.advance(task, ev.nbytes)
        elif ev.kind == "start":
            bar.update(task, description=f"{what}: {ev.item}")
            if ev.item == "verify" and ev.total is not None:
                bar.update(task, total=ev.total)
        elif ev.kind == "note":
            bar.console.print(ui.visible(f"{ev.item}: {ev.message}"), markup=False, highlight=False)

    with bar:
        yield render


def cmd_lock(args: argparse.Namespace) -> int:
    from appliance_cli.bundle.lock import LockOptions, lock_profile
    from appliance_cli.bundle.mirrors import MirrorMap
    from appliance_cli.errors import BundleError

    mirrors = MirrorMap.parse(args.mirror)
    with _progress("locking") as progress:
        res = lock_profile(
            LockOptions(args.profile, mirrors, args.update, args.check, args.cache, progress=progress)
        )
    methods = ", ".join(f"{n} {m}" for m, n in sorted(res.methods.items()))
    if args.check:
        for line in res.drift:
            ui.error(line)
        if res.drift:
            raise BundleError(
                f"{res.path}: {len(res.drift)} {'entry differs' if len(res.drift) == 1 else 'entries differ'} "
                "from upstream now",
                hint="review each, then `appliance bundle lock --update NAME` what should move",
            )
        ui.info(f"{res.path}: all {len(res.resolved)} entries still resolve as locked ({methods})")
        return 0
    state = "written" if res.written else "unchanged"
    ui.info(
        f"{res.path} {state}: {len(res.resolved)} resolved, {len(res.kept)} kept as locked; "
        f"by method: {methods or 'none'}"
    )
    return 0


def cmd_build(args: argparse.Namespace) -> int:
    from appliance_cli.bundle import BuildOptions, build_bundle
    from appliance_cli.bundle.mirrors import MirrorMap
    from appliance_cli.bundle.model import DEFAULT_CHUNK_SIZE

    mirrors = MirrorMap.parse(args.mirror)
    with _progress("building") as progress:
        res = build_bundle(
            BuildOptions(
                profile=args.profile,
                out=args.out,
                cache=args.cache,
                chunk_size=args.chunk_size or DEFAULT_CHUNK_SIZE,
                fsync=not args.no_fsync,
                progress=progress,
                mirrors=mirrors,
            )
        )
    m = res.manifest
    ui.info(
        f"{res.path}: profile {m.profile}, {len(m.artifacts)} artifacts; "
        f"{res.blobs_written} blobs written ({_human(res.bytes_written)}), {res.blobs_skipped} already present, "
        f"{res.pruned} pruned; {res.seconds:.1f}s"
    )
    if res.signature_kept:
        ui.info("manifest unchanged: the existing signature still applies")
    else:
        ui.info(f"next: appliance bundle sign {res.path} --key KEY.key")
    return 0


def cmd_keygen(args: argparse.Namespace) -> int:
    from appliance_cli.bundle import keygen

    priv, pub, kid = keygen(Path(args.out), force=args.force)
    ui.info(f"private key {priv} (mode 0600: keep it off the bundle stick)")
    ui.info(f"public key  {pub}  key id {kid}")
    return 0


def cmd_sign(args: argparse.Namespace) -> int:
    from appliance_cli.bundle import sign_bundle

    kid = sign_bundle(args.dir, args.key)
    ui.info(f"signed {args.dir}/manifest.json with key {kid}")
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    from appliance_cli.bundle import BundleVerifyError, verify_bundle

    if args.jobs is not None and args.jobs < 1:
        raise UsageError("--jobs must be at least 1")
    try:
        with _progress("verifying") as progress:
            rep = verify_bundle(
                args.dir,
                key=args.key,
                jobs=args.jobs,
                progress=progress,
                require_signature=args.require_signature,
            )
    except BundleVerifyError as exc:
        for line in exc.problems:
            ui.err.print(f"[red]BAD[/] {escape(ui.visible(line))}", markup=True, highlight=False)
        raise
    sig = (
        f"signature valid (key {rep.key_id})"
        if rep.signature_valid
        else "signature NOT checked (no --key)"
        if rep.signed
        else "UNSIGNED"
    )
    ui.info(
        f"{rep.path}: OK — {rep.artifacts} artifacts, {rep.blobs} blobs, {_human(rep.bytes)} re-hashed in "
        f"{rep.seconds:.2f}s ({_human(rep.throughput)}/s, {rep.jobs} jobs); {sig}"
    )
    if not rep.signature_valid:
        ui.warn("`appliance install` needs a bundle signed by the trusted key")
    return 0


def cmd_check_complete(args: argparse.Namespace) -> int:
    from appliance_cli.bundle.completeness import check_profile
    from appliance_cli.bundle.profile import load_profile
    from appliance_cli.errors import BundleError

    if not args.profile or args.dir:
        raise UsageError("--check-complete checks a profile: give --profile P (and no bundle directory)")
    res = check_profile(load_profile(args.profile), args.charts)
    for p in res.pulls:
        mark = "ok " if p.ok else "BAD"
        ui.info(f"{mark} {p.source:<40} {p.key:<36} {p.reference}")
    for note in res.notes:
        ui.info(f"note: {note}")
    problems = res.problems()
    for line in problems:
        ui.error(line)
    if problems:
        raise BundleError(
            f"profile {res.profile}: {len(problems)} of {len(res.pulls)} pulled images not covered",
            hint="list each in the profile's images (and the chart's images), and override its registry in "
            "the chart's values file",
        )
    ui.info(
        f"profile {res.profile}: all {len(res.pulls)} images the roles and charts pull are listed and overridden"
    )
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    from appliance_cli.bundle import inspect_bundle

    if args.check_complete:
        return cmd_check_complete(args)
    if args.dir is None:
        raise UsageError("bundle inspect needs the bundle directory (or --check-complete --profile P)")

    ins = inspect_bundle(args.dir)
    ui.info(
        f"{ins.path}: profile {ins.profile}, created {ins.created}, {'signed' if ins.signed else 'UNSIGNED'}"
    )
    t = Table("kind", "artifacts", "size", show_edge=False)
    for kind, (n, size) in sorted(ins.by_kind().items()):
        t.add_row(ui.cell(kind), str(n), _human(size))
    ui.out.print(t)
    if args.all:
        t = Table("kind", "name", "version", "size", "files", "test only", "digest", show_edge=False)
        for a in ins.artifacts:
            t.add_row(
                ui.cell(a.kind),
                ui.cell(a.name),
                ui.cell(a.version or ""),
                _human(a.size),
                str(len(a.files)),
                "yes" if a.test_only else "",
                ui.cell(a.digest[:19]),
            )
        ui.out.print(t)
    ui.info(
        f"{len(ins.artifacts)} artifacts ({ins.test_only} test-only); {_human(ins.logical_bytes)} in artifacts, "
        f"{_human(ins.unique_bytes)} in {ins.unique_blobs} unique blobs: dedup ratio {ins.dedup_ratio:.2f}x"
    )
    return 0


def cmd_import_runai(args: argparse.Namespace) -> int:
    from appliance_cli.bundle import import_runai

    with _progress("importing") as progress:
        arts = import_runai(args.tar, args.into, progress=progress)
    kinds: dict[str, int] = {}
    for a in arts:
        kinds[a.kind] = kinds.get(a.kind, 0) + 1
    summary = ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))
    ui.info(f"imported {args.tar.name} into {args.into}: {summary}")
    ui.info(f"the manifest changed: re-sign with `appliance bundle sign {args.into} --key KEY.key`")
    return 0
