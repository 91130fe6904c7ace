"""Command line: `privfgl run`, `privfgl audit`, `privfgl datasets`, `privfgl partition`, `privfgl sweep`,
`privfgl quickstart`."""
from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import re
import signal
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from privfgl.errors import ConfigError

# The names of attacks.audit.ATTACKS, spelled out so that building the parser imports no attack module
# (tests/attacks/test_audit_cli.py checks that the two agree).
ATTACK_NAMES = ("gradient-inversion", "label-inference", "stats-reconstruction", "membership", "link-stealing",
                "edge-recovery", "he-key-recovery", "dp-noise-removal", "participation", "secagg-collusion",
                "split-features", "split-labels", "split-topology", "split-decoder", "dp-collusion", "crypten-seed-search",
                "dp-audit", "split-dp-sensitivity")

if TYPE_CHECKING:
    from privfgl.experiment import RunConfig

# Start-up (issue #21): this module imports neither torch nor torch_geometric; a command imports what
# it runs. The method names for --help, kept equal to privfgl.methods.METHODS by tests/test_startup.py.
METHOD_NAMES = ("local", "fedavg", "fedprox", "opfgl", "dp-fedavg", "dp-sgd", "fedspray", "fedomd", "fedgpl",
                "fedlog", "gap", "lapgraph")


def _run_fields() -> list[str]:
    """RunConfig's field names (imports privfgl.experiment, so only when a command runs)."""
    from privfgl.experiment import RunConfig
    return [f.name for f in dataclasses.fields(RunConfig)]


def _ratios(text: str) -> tuple[float, float, float]:
    try:
        parts = tuple(float(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--split {text!r}: expected three numbers like 0.2,0.4,0.4")
    if len(parts) != 3:
        raise argparse.ArgumentTypeError(f"--split {text!r}: expected three numbers train,val,test like 0.2,0.4,0.4")
    return parts


def _settings(text: str) -> tuple[str, ...]:
    return tuple(s.strip() for s in text.split(","))


class _Once(argparse.Action):
    """A flag that may be given once: a second value is refused rather than silently replacing the first."""

    def __call__(self, parser, namespace, values, option_string=None):
        if getattr(namespace, self.dest, None) is not None:
            parser.error(f"argument {option_string}: given twice ({getattr(namespace, self.dest)!r}, then {values!r}); "
                         "give it once")
        setattr(namespace, self.dest, values)


def _absent(text: str) -> tuple[str, list[int]]:
    """--absent ROUND:K[+K...] -> (round, [clients]); ROUND may be * (every round)."""
    round_, _, who = text.partition(":")
    try:
        clients = [int(k) for k in who.split("+")]
        round_ = round_.strip() if round_.strip() == "*" else str(int(round_))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected ROUND:K[+K...], e.g. 3:0+4 or *:1") from None
    return round_, clients


def _key_value(text: str) -> tuple[str, object]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"{text!r}: expected KEY=VALUE")
    key, value = text.split("=", 1)
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    """Options of `privfgl run` (defaults None: unset options fall back to --config, then RunConfig)."""
    a = p.add_argument
    a("--method", help=", ".join(METHOD_NAMES) + " (default: fedavg)")
    a("--dataset", help="cora, citeseer, pubmed, computers, photo, cs, physics, wikics, sbm, sbm-<preset> (default: cora)")
    a("--partition", help="louvain, metis, louvain+, metis+, dirichlet, planted (a synthetic graph's own clients), "
                          "tasks (fedgpl: induced sample graphs, a third of the clients per task level), file:PATH "
                          "(given from outside: one line of node ids per client, a JSON list of lists, or a glob of "
                          "one file per client; docs/architecture.md)")
    a("--clients", type=int, help="number of clients K")
    a("--rounds", type=int, help="communication rounds")
    t = p.add_argument_group("model and local training", "the baselines' settings; a method that trains its own "
                             "model (opfgl, fedspray, fedomd, fedgpl, fedlog; dp-sgd in part) refuses the ones it "
                             "ignores and names its own --method-param (privfgl/methods/options.py)").add_argument
    t("--local-epochs", type=int, help="local epochs per round (default 3)")
    t("--finetune-epochs", type=int, help="local fine-tuning epochs after the last round (default 0 = none)")
    t("--mu", type=float, help="FedProx proximal weight (default 0.01)")
    t("--model", help="gcn (default), sage, gat, sgc, mlp")
    t("--hidden", type=int, help="hidden width (default 64)")
    t("--layers", type=int, help="GNN layers (default 2)")
    t("--dropout", type=float, help="(default 0.5)")
    t("--lr", type=float, help="learning rate (default 0.01)")
    t("--weight-decay", type=float, help="(default 5e-4)")
    t("--optimizer", help="local optimizer: adam (default) or sgd")
    t("--engine", help="auto (default), stacked (all clients at once), looped (one model per client), or ray: "
                       "each client a Ray actor holding its data, model and protocol keys (every method; "
                       "docs/cluster.md)")

    t("--evaluation", help="local_model (default: each client's model after its local training, as OpenFGL) "
                           "or global_model (the aggregated model on each client's data)")
    a("--ray-address", metavar="HOST:PORT", help="--engine ray: a running Ray cluster's head (default: a local Ray)")
    a("--clients-per-actor", type=int, metavar="N", help="--engine ray: clients each actor hosts (default 1)")
    a("--split", type=_ratios, help="train,val,test ratios per client and class (default 0.2,0.4,0.4)")
    a("--split-mode", help="stratified (default: per client and class) or random (per client, at least one "
                           "training node; FedOMD's 1%%/20%%/20%% split)")
    a("--split-file", metavar="PATH", help="per-client train/val/test node ids from outside (JSON: one {\"train\", "
                                           "\"val\", \"test\"} object of global node ids per client); replaces "
                                           "the drawn split (docs/architecture.md)")
    a("--protocol", help="plain, crypten, ckks, bfv, secagg (pairwise masking with dropout; docs/secure-aggregation.md)")
    a("--crypten-mode", choices=("inprocess", "multiprocess"),
      help="crypten only: simulate the parties in this process (default) or run each client and the server "
           "as its own OS process over torch.distributed")
    a("--protocol-param", type=_key_value, action="append", metavar="KEY=VALUE",
      help="protocol parameter, e.g. precision_bits=20 or mode=multiprocess (repeatable)")
    a("--dp", metavar="SPEC", action=_Once,
      help="differential privacy on a message, e.g. gaussian:sigma=1.0,clip=1.0,on=update,mode=central or "
           "laplace:epsilon=1.0,clip=1.0,on=stats,mode=local (README: Differential privacy); once per run "
           "(on=all or an alias covers several messages)")
    a("--partition-param", type=_key_value, action="append", metavar="KEY=VALUE",
      help="partition parameter, e.g. alpha=0.5 for dirichlet (repeatable)")
    a("--method-param", type=_key_value, action="append", metavar="KEY=VALUE",
      help="method-specific setting (repeatable)")
    a("--seed", type=int)
    a("--partition-seed", type=int, help="seed of the partition and splits (default: --seed)")
    a("--device", help="cpu (default) or cuda")
    a("--evaluate", type=_settings, metavar="SETTINGS",
      help="evaluation settings, comma-separated: seen (default), unseen-node, missing-class, new-client (the "
           "closed-set regime: all four are reported), or open-set (docs/evaluation-settings.md)")
    a("--absent", type=_absent, action="append", dest="absent_flags", metavar="ROUND:K[+K...]",
      help="leave clients out of a round's sums under any protocol (ROUND * = every round; repeatable), e.g. 3:0+4")
    a("--absent-rate", type=float, metavar="P",
      help="leave each client out of each round with probability P (drawn from the seed: the same clients under "
           "every protocol); methods weight by the survivors (record: cost.participation)")
    a("--canaries", type=int, metavar="N",
      help="insert N auditor's canary nodes per client before training (isolated, random words and label, each a "
           "training node by a fair coin, in no test mask); membership:candidates=canaries attacks them")
    a("--canary-seed", type=int, metavar="S", help="seed of the canaries' draw (default: --seed)")
    a("--data-root", help="folder with the datasets (default $PRIVFGL_DATA, else ~/.cache/privfgl/datasets)")
    a("--offline", action="store_true", default=None, help="never download; fail if the dataset is not on disk")
    a("--transcript", help="which payloads the transcript keeps: last (default; all under audit or --save-view), "
                           "all, none")
    a("--config", help="JSON or YAML file of settings (keys as in the run record's config); flags override it")
    a("--out", help="write the run record (JSON) here")
    a("--save-view", metavar="DIR", help="write the adversary's view (the server's by default: every message it "
                                         "received, with tensors as .npy and ciphertexts/shares as raw bytes) to DIR "
                                         "for an auditor's own script (README: Threat model); a view saved there before is "
                                         "replaced")
    a("--no-progress", action="store_true", help="no progress bar")
    a("--allocator", help="auto (default: keep freed memory in the process when activations pass glibc's 32 MB mmap "
                          "ceiling, which makes rounds on 1M-node graphs linear in nodes), keep, or system (docs/scale.md)")
    a("--threads", type=int, help="CPU threads for torch (default: torch's, i.e. the cores); a run is bit-identical "
                                  "per seed at the same thread count (the record's config.threads)")


def config_from_args(args: argparse.Namespace) -> RunConfig:
    """RunConfig defaults < the method's defaults < --config file < command-line flags."""
    values: dict = {}
    if args.config:
        values.update(_read_config(Path(args.config)))
    for name in _run_fields():
        v = getattr(args, name, None)
        if v is not None:
            values[name] = v
    if args.protocol_param:
        values["protocol_params"] = {**values.get("protocol_params", {}), **dict(args.protocol_param)}
    if getattr(args, "crypten_mode", None):
        if values.get("protocol", "plain") != "crypten":
            raise ConfigError("--crypten-mode needs --protocol crypten")
        given = values.get("protocol_params", {}).get("mode")
        if given is not None and given != args.crypten_mode:
            raise ConfigError(f"--crypten-mode {args.crypten_mode} and --protocol-param mode={given} disagree; "
                              "give one of them")
        values["protocol_params"] = {**values.get("protocol_params", {}), "mode": args.crypten_mode}
    if args.method_param:
        values["method_params"] = {**values.get("method_params", {}), **dict(args.method_param)}
    if args.partition_param:
        values["partition_params"] = {**values.get("partition_params", {}), **dict(args.partition_param)}
    if getattr(args, "absent_flags", None):
        mask = {str(r): list(v) for r, v in values.get("absent", {}).items()}
        for r, clients in args.absent_flags:
            mask[r] = sorted(set(mask.get(r, [])) | set(clients))
        values["absent"] = mask
    if args.offline:
        values["download"] = False
    if args.no_progress:
        values["progress"] = False
    from privfgl.experiment import config_for
    return config_for(values)


def _read_config(path: Path) -> dict:
    if not path.is_file():
        raise ConfigError(f"--config {path}: {'a folder, not a file' if path.is_dir() else 'no such file'}")
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"--config {path}: cannot be read ({e})") from None
    if path.suffix in (".yaml", ".yml"):
        import yaml
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as e:
            where = getattr(e, "problem_mark", None)
            at = f" at line {where.line + 1}, column {where.column + 1}" if where else ""
            raise ConfigError(f"--config {path}: not valid YAML{at}: {getattr(e, 'problem', None) or e}") from None
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            where = f"line {e.lineno}, column {e.colno}"
            raise ConfigError(f"--config {path}: not valid JSON at {where}: {e.msg}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"--config {path}: expected a mapping of settings, got {type(data).__name__}")
    from privfgl.data.partition_file import resolve_partition
    from privfgl.data.split_file import resolve_split_file
    values = {k.replace("-", "_"): v for k, v in data.items()}
    if "partition" in values:  # file:PATH relative to the config file's folder
        values["partition"] = resolve_partition(values["partition"], path.parent)
    if "split_file" in values:
        values["split_file"] = resolve_split_file(values["split_file"], path.parent)
    return values


def cmd_run(args: argparse.Namespace) -> int:
    from privfgl.experiment import run
    from privfgl.results import format_table, write_record
    imports_done()
    cfg = config_from_args(args)
    if args.save_view and cfg.transcript == "none":
        raise ConfigError("--save-view with --transcript none: the view would hold no payloads; valid: "
                          "--transcript last or all (all by default with --save-view)")
    check_outputs(args)
    if args.save_view and args.transcript is None and cfg.transcript == "last":
        cfg = dataclasses.replace(cfg, transcript="all")  # the view holds every round's payloads
    record, setup = run(cfg)
    if args.out:
        write_record(record, args.out)
    _save_view(args, setup)
    print(format_table([record]))
    if args.out:
        print(f"run record: {args.out}")
    return 0


def cmd_audit(args: argparse.Namespace) -> int:
    """`privfgl run`, then the attacks on the adversary's view; findings land in the record's `attacks`."""
    from attacks import format_findings, parse_attack, run_attacks
    from attacks.audit import check_audit, prepare_attacks
    from privfgl.experiment import run
    from privfgl.results import format_table, write_record
    imports_done()
    try:
        attacks = [parse_attack(spec) for spec in args.attack]
    except ValueError as e:
        raise ConfigError(str(e)) from None
    cfg = config_from_args(args)
    if cfg.engine == "ray":
        from privfgl.federation.ray.auditor import check_ray_audit
        try:
            check_ray_audit(attacks, cfg.method)
        except ValueError as e:
            raise ConfigError(str(e)) from None
    try:
        check_audit(attacks, args.adversary, cfg.clients, cfg.canaries)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if cfg.transcript == "none":
        raise ConfigError("audit with --transcript none: the attacks would have no payloads to read; valid: "
                          "--transcript last or all (all by default under audit)")
    check_outputs(args)
    if args.transcript is None and cfg.transcript == "last":
        cfg = dataclasses.replace(cfg, transcript="all")  # attacks read earlier rounds' payloads
    on_ray = (attacks, args.adversary) if cfg.engine == "ray" else None  # scored by the auditor's actor
    try:
        record, setup = run(cfg, prepare=prepare_attacks(attacks, cfg.method), ray_audit=on_ray)
    except ValueError as e:  # an attack's prepare refused the run (one line)
        raise ConfigError(str(e)) from None
    if on_ray is None:
        record["attacks"] = [f.as_record() for f in run_attacks(setup, cfg, attacks, args.adversary)]
    if args.out:
        write_record(record, args.out)
    _save_view(args, setup, args.adversary)
    print(format_table([record]))
    print(format_findings(record["attacks"]))
    if args.out:
        print(f"run record: {args.out}")
    return 0


def check_writable(path: str | Path, flag: str, directory: bool = False) -> None:
    """Raise ConfigError (one line) unless `path` can be written: a file (or, with `directory`, a
    folder) whose parent exists or can be created and is writable. Checked before a run starts, so
    a bad path never costs the run."""
    path = Path(os.path.realpath(path))  # a symlink: its target is what gets written
    if path.exists() and not path.is_dir() and not path.is_file():
        raise ConfigError(f"{flag} {path}: is not a regular file (a device, FIFO or socket), which the "
                          f"atomic write would replace; give a {'folder' if directory else 'file path'}")
    if path.exists() and path.is_dir() != directory:
        raise ConfigError(f"{flag} {path}: is {'a folder' if path.is_dir() else 'a file'}; give a "
                          f"{'folder' if directory else 'file path'}")
    parent = path if directory else path.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"{flag} {path}: cannot create {parent} ({e.strerror or e})") from None
    try:  # a probe file where the output's temp file will go (os.access is blind to root and mounts)
        with tempfile.NamedTemporaryFile(dir=parent, prefix=".privfgl-probe-"):
            pass
    except OSError as e:
        raise ConfigError(f"{flag} {path}: {parent} is not writable ({e.strerror or e})") from None
    if path.exists() and not directory and not os.access(path, os.W_OK):
        raise ConfigError(f"{flag} {path}: the file is not writable")


def check_outputs(args: argparse.Namespace) -> None:
    """--out and --save-view, before the run."""
    for flag, value in (("--out", args.out), ("--save-view", args.save_view)):
        if value is not None and not value.strip():
            raise ConfigError(f"{flag}: an empty path; give a {'folder' if flag == '--save-view' else 'file path'}")
    if args.out:
        check_writable(args.out, "--out")
    if args.save_view:
        check_writable(args.save_view, "--save-view", directory=True)


def _save_view(args: argparse.Namespace, setup, party: str = "server") -> None:
    if args.save_view:
        from attacks.view import adversary_view, save_view
        path = save_view(adversary_view(setup.federation.transcript, party), args.save_view)
        print(f"{party}'s view: {path}")


def cmd_datasets(args: argparse.Namespace) -> int:
    from privfgl.data import dataset_status, resolve_data_root
    root = resolve_data_root(args.data_root)
    print(f"data root: {root}")
    for row in dataset_status(args.data_root):
        print(f"  {row['name']:<10} {'available' if row['available'] else 'missing  '}  {row['path']}")
    print("synthetic (always available): sbm, " + ", ".join(_synthetic_names()))
    return 0


def cmd_partition(args: argparse.Namespace) -> int:
    """Write privfgl's own partition of a dataset in the format `--partition file:PATH` reads, for a
    peer's code (or a later run) to use: the same partition a run with these settings builds."""
    from privfgl.data import load_dataset, partition_nodes
    from privfgl.data.partition_file import is_file_partition, write_partition
    from privfgl.experiment import partition_cache_dir
    imports_done()
    if is_file_partition(args.partition):
        raise ConfigError(f"--partition {args.partition}: already a file; valid: a built-in partition "
                          "(louvain, metis, louvain+, metis+, dirichlet, planted)")
    check_writable(args.out, "--out")
    data = load_dataset(args.dataset, args.data_root, download=not args.offline)
    parts = partition_nodes(data, args.partition, args.clients, seed=args.seed, cache_dir=partition_cache_dir(),
                            **dict(args.partition_param or []))
    sha = write_partition(parts, args.out, args.format)
    print(f"{args.out}: {args.dataset} {args.partition}, {len(parts)} clients, seed {args.seed}, sizes "
          f"{[int(p.numel()) for p in parts]}, sha256 {sha}")
    return 0


def _synthetic_names() -> list[str]:
    from privfgl.data import CLIENT_PRESETS, SYNTHETIC_PRESETS
    from privfgl.data.synthetic import SCALE_PRESETS
    return [f"sbm-{n}" if not n.startswith("sbm") else n for n in (*SYNTHETIC_PRESETS, *CLIENT_PRESETS, *SCALE_PRESETS)]


def cmd_sweep(args: argparse.Namespace) -> int:
    """Run a sweep's missing cells (resumable), then write its tables and plots."""
    from privfgl.sweep import load_sweep
    overrides = {}
    if args.data_root:
        overrides["data_root"] = args.data_root
    if args.offline:
        overrides["download"] = False
    sweep = load_sweep(args.config, results=args.results, overrides=overrides, seeds=args.seeds)
    if args.doc:
        sweep = dataclasses.replace(sweep, doc=args.doc)
    subset = None
    if args.cells:
        chosen = tuple(c for c in sweep.cells if args.cells in c.label)
        if not chosen:
            raise ConfigError(f"--cells {args.cells!r}: no cell label contains it; labels: "
                              f"{'; '.join(c.label for c in sweep.cells)}")
        subset = dataclasses.replace(sweep, cells=chosen)
    return _sweep(sweep, args, subset)


def _sweep(sweep, args: argparse.Namespace, subset=None) -> int:
    """Run `subset` (default: the whole sweep), then report on the whole sweep's records."""
    from privfgl.sweep import check_cells, report, run_sweep
    from privfgl.sweep.runner import check_parallelism
    imports_done()
    todo = subset or sweep
    check_parallelism(args.jobs, args.ray)
    if args.ray not in (None, "local"):
        from privfgl.sweep.ray_tasks import check_address
        check_address(args.ray)  # before any folder is made (Ray itself is joined when the runs start)
    if args.table_only and not Path(sweep.results).is_dir():
        raise ConfigError(f"--table-only: results folder {sweep.results} does not exist (no records to report)")
    if not args.table_only:
        check_cells(todo)  # before any folder is made: a refused sweep leaves nothing behind
    doc_flag = "--doc" if getattr(args, "doc", None) else f"[sweep] doc of {sweep.source}"
    if sweep.doc and (Path(sweep.doc).suffix.lower() != ".md"
                      or Path(os.path.realpath(sweep.doc)) == Path(os.path.realpath(sweep.source))):
        raise ConfigError(f"{doc_flag} {sweep.doc}: the report's block goes into a Markdown page; valid: a .md file "
                          "(not the sweep's config)")
    check_writable(sweep.results, "results folder", directory=True)
    if sweep.doc:
        check_writable(sweep.doc, doc_flag)
    failures = []
    if not args.table_only:
        failures = run_sweep(todo, jobs=args.jobs, progress=not args.no_progress, ray=args.ray)
    table, files = report(sweep)
    print(table)
    for path in files:
        print(f"written: {path}")
    for line in failures:
        print(f"privfgl: failed run: {line}", file=sys.stderr)
    return 1 if failures else 0


def cmd_quickstart(args: argparse.Namespace) -> int:
    """The privacy audit of `make run`: the sweep privfgl/sweep/quickstart.toml (FedAvg on Cora
    under plain, CrypTen, CKKS, secagg and central DP, each attacked); the synthetic graph offline."""
    from privfgl.data import DatasetUnavailable, load_dataset
    from privfgl.sweep import load_sweep
    overrides = {"data_root": args.data_root} if args.data_root else {}
    try:
        load_dataset("cora", args.data_root, download=not args.offline)
    except DatasetUnavailable as e:
        reason = " ".join(str(e).split())
        print(f"Cora is not available ({reason}); running on the built-in synthetic graph 'sbm' instead.")
        overrides["dataset"] = "sbm"
    if args.offline:
        overrides["download"] = False
    if args.rounds is not None:
        overrides["rounds"] = args.rounds
    config = Path(__file__).parent / "sweep" / "quickstart.toml"
    sweep = load_sweep(config, results=Path(args.out_dir), overrides=overrides, seeds=args.seeds)
    return _sweep(sweep, args)


def _sweep_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--jobs", type=int, default=1, help="runs in parallel, one process and one torch thread each "
                                                       "(default 1: in this process, with a progress bar per run)")
    p.add_argument("--ray", nargs="?", const="local", metavar="ADDRESS",
                   help="each run a Ray task, on the cluster whose head is ADDRESS (HOST:PORT, e.g. 10.0.0.1:6379), "
                        "or without ADDRESS on a Ray started for this sweep on this machine (docs/cluster.md)")
    p.add_argument("--table-only", action="store_true", help="no runs: the tables and plots from the records there")
    p.add_argument("--data-root", help="folder with the datasets (default $PRIVFGL_DATA)")
    p.add_argument("--offline", action="store_true", help="never download a dataset")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--seeds", type=_seed_list, help="comma-separated seeds, instead of the config's (e.g. 0,1)")


def _seed_list(text: str) -> list[int]:
    try:
        return [int(s) for s in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--seeds {text!r}: expected integers like 0,1,2") from None


class _Parser(argparse.ArgumentParser):
    """An argument error is one line on stderr and exit code 2, like the CLI's other bad-input errors
    (argparse's default also prints the usage; subcommands inherit this class)."""

    def error(self, message: str):
        flag = re.match(r"argument (--[\w-]+)(/\S+)?: expected one argument$", message)
        if flag:  # argparse takes a value such as -0.2,0.4 for an option, and reports the value missing
            message += f"; a value that starts with '-' is written {flag.group(1)}=VALUE"
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="privfgl", description="Privacy testbed for federated graph learning.")
    sub = parser.add_subparsers(dest="command", required=True)
    p_run = sub.add_parser("run", help="run one method on one dataset and write its run record")
    add_run_arguments(p_run)
    p_run.set_defaults(func=cmd_run)
    p_audit = sub.add_parser("audit", help="run a method, then attacks on what the adversary saw")
    add_run_arguments(p_audit)
    p_audit.add_argument("--attack", action="append", required=True, metavar="NAME[:KEY=VALUE,...]",
                         help=f"{', '.join(ATTACK_NAMES)} (repeatable), e.g. "
                              "gradient-inversion:variant=dictionary,clients=0+3 (README: Attacks and audits)")
    p_audit.add_argument("--adversary", default="server", help="the party whose view the attacks read (default server)")
    p_audit.set_defaults(func=cmd_audit)
    p_ds = sub.add_parser("datasets", help="which datasets are available offline, and where")
    p_ds.add_argument("--data-root")
    p_ds.set_defaults(func=cmd_datasets)
    p_pa = sub.add_parser("partition", help="write privfgl's partition of a dataset to a file (one line of node "
                                            "ids per client, or JSON), for --partition file:PATH or a peer's code")
    p_pa.add_argument("--dataset", default="cora", help="(default cora)")
    p_pa.add_argument("--partition", required=True, help="louvain, metis, louvain+, metis+, dirichlet, planted")
    p_pa.add_argument("--clients", type=int, default=10, help="number of clients K (default 10)")
    p_pa.add_argument("--seed", type=int, default=0, help="the partition's seed, as a run's --partition-seed "
                                                         "(default 0; O-pFGL's presets use 42)")
    p_pa.add_argument("--partition-param", type=_key_value, action="append", metavar="KEY=VALUE",
                      help="partition parameter, as for run (repeatable)")
    p_pa.add_argument("--format", choices=("lines", "json"), default="lines",
                      help="lines (default: one line of space-separated node ids per client) or json")
    p_pa.add_argument("--out", required=True, help="the file to write")
    p_pa.add_argument("--data-root", help="folder with the datasets (default $PRIVFGL_DATA)")
    p_pa.add_argument("--offline", action="store_true", help="never download the dataset")
    p_pa.set_defaults(func=cmd_partition)
    p_sw = sub.add_parser("sweep", help="a grid of runs from a TOML file: one record per cell and seed "
                                        "(resumable), a table with mean ± std over seeds, PNG plots")
    p_sw.add_argument("config", help="the sweep's TOML file (format: privfgl/sweep/config.py, README: Sweeps)")
    p_sw.add_argument("--results", help="results folder (default: the file's [sweep] results, else runs/NAME)")
    p_sw.add_argument("--cells", metavar="TEXT", help="only the cells whose label contains TEXT")
    p_sw.add_argument("--doc", help="a Markdown page whose block for this sweep the report rewrites (default: the "
                                    "file's [sweep] doc, if any)")
    _sweep_arguments(p_sw)
    p_sw.set_defaults(func=cmd_sweep)
    p_q = sub.add_parser("quickstart", help="the privacy audit `make run` runs: FedAvg on Cora under plain, "
                                            "crypten, ckks, secagg and central DP, each attacked (a small sweep)")
    p_q.add_argument("--out-dir", default="runs/quickstart", help="results folder (default runs/quickstart)")
    p_q.add_argument("--rounds", type=int, help="rounds per run (default: the config's, 15)")
    _sweep_arguments(p_q)
    p_q.set_defaults(func=cmd_quickstart)
    return parser


_GC_PAUSED_FOR_IMPORTS = False


def entry() -> None:
    """The `privfgl` console script: `main` in a process of its own, with the cyclic garbage collector
    kept off the start-up and the exit. Importing torch and PyG creates ~300k objects that live until
    exit; with the collector on, the imports rescan them in dozens of full collections (~1 s) and the
    exit once more (~1.3 s; docs/speed.md). So the collector is paused until the command's imports are
    done (`imports_done`), what they built is frozen (`gc.freeze`: never scanned again, still freed at
    exit), and it is frozen again before exit. `main` alone (tests, notebooks) leaves the collector as is."""
    global _GC_PAUSED_FOR_IMPORTS
    gc.disable()
    _GC_PAUSED_FOR_IMPORTS = True
    signal.signal(signal.SIGTERM, _terminated)
    try:
        code = main()
    finally:
        imports_done()
    gc.freeze()
    sys.exit(code)


def _terminated(signum, frame) -> None:
    """SIGTERM (`kill`, `timeout`, a scheduler) as Ctrl-C: the run unwinds, so the protocols' private
    temporary folders (clients' inputs in /dev/shm under mode=multiprocess) and party processes are
    removed instead of outliving it."""
    raise KeyboardInterrupt


def imports_done() -> None:
    """A command's heavy imports are done: under `entry`, freeze what they built and resume the collector."""
    global _GC_PAUSED_FOR_IMPORTS
    if _GC_PAUSED_FOR_IMPORTS:
        _GC_PAUSED_FOR_IMPORTS = False
        gc.freeze()
        gc.enable()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ValueError as e:  # bad input (ConfigError, DataError, ProtocolError, a method's check): one line
        print(f"privfgl: error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("privfgl: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    entry()
