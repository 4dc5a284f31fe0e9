"""Write a redacted bundle of this machine for offline diagnosis (`oomdoctor doctor --bundle FILE`).

Secrets in the environment, logs and manifests are redacted before anything is written; see
docs/bundle.md for the layout and exactly what is collected.
"""

from __future__ import annotations

import argparse
import sys

from oomdoctor.errors import UsageError

NAME = "bundle"
HELP = "write a redacted bundle of this machine (.tar.gz) for offline diagnosis"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-o", "--output", metavar="FILE.tar.gz", required=True, help="where to write the bundle")
    parser.add_argument("--log", metavar="FILE", action="append", default=[],
                        help="add a log (e.g. the OOM traceback) under logs/, redacted; over 32 MiB, its first 8 MiB and "
                             "last 24 MiB are kept; repeatable")
    parser.add_argument("--manifest", metavar="FILE", action="append", default=[],
                        help="add a Kubernetes manifest (kubectl get pod -o yaml) under k8s/, Secrets blanked; repeatable")
    parser.add_argument("--probe", action="store_true",
                        help="also run the active CUDA probes (child processes with time limits) into commands/probe.json")
    parser.add_argument("--probe-attempts", metavar="N", type=int, default=5,
                        help="CUDA context creations for --probe, each in a fresh process (default: 5)")


def run(args: argparse.Namespace) -> int:
    from oomdoctor.collectors.bundle_write import write_bundle

    if args.probe_attempts < 1 or args.probe_attempts > 100:
        raise UsageError("--probe-attempts must be between 1 and 100")
    if not args.output.endswith((".tar.gz", ".tgz")):
        raise UsageError(f"-o {args.output}: the bundle is a .tar.gz (e.g. -o node.tar.gz)")
    writer = write_bundle(args.output, logs=args.log, manifests=args.manifest, probe=args.probe,
                          probe_attempts=args.probe_attempts)
    for note in writer.notes:  # a log cut to its head and tail: say so, it is not what was given
        print(f"oomdoctor bundle: warning: {note}", file=sys.stderr)
    print(f"wrote {args.output} ({len(writer.files)} files; secrets redacted; see docs/bundle.md)", file=sys.stderr)
    return 0
