"""`accel launch` flags for hardware, processes, machines, the rendezvous and the script."""

from __future__ import annotations

from accel_launch.flag_spec import Flag, Group

__all__ = ["CORE_GROUPS"]

_TOP = ""

_LAUNCHER = Group("launcher", "Where the defaults come from and what the launcher prints.", (
    Flag(("--config_file",), "Config file with the defaults (Accelerate's YAML schema, or a "
         "DeepSpeed JSON, which then runs DeepSpeed with it). Default: $ACCEL_CONFIG_FILE / "
         "$ACCELERATE_CONFIG_FILE, else the file `accel config` writes, if it exists.",
         metavar="PATH"),
    Flag(("--dry_run",), "Print the resolved configuration, where each value came from, the "
         "worker command and environment, then exit without starting anything.", "switch",
         default=False),
    Flag(("-q", "--quiet"), "Only print errors from the launcher (the workers' output is kept).",
         "switch", default=False),
    Flag(("--debug",), "Check tensor shapes across ranks before collectives (ACCELERATE_DEBUG_MODE)"
         " and show full launcher tracebacks.", "switch", default=False,
         config=(_TOP, "debug"), env="ACCELERATE_DEBUG_MODE"),
))

_HARDWARE = Group("hardware", "What the workers run on.", (
    Flag(("--cpu",), "Run on the CPU even if an accelerator is present (ACCELERATE_USE_CPU); "
         "--num_processes N really starts N CPU processes (gloo).", "switch", default=False,
         config=(_TOP, "use_cpu"), env="ACCELERATE_USE_CPU"),
    Flag(("--multi_gpu",), "One process per GPU (already the default when CUDA devices exist).",
         "switch", default=False),
    Flag(("--mixed_precision",), "Mixed precision of the workers (ACCELERATE_MIXED_PRECISION). "
         "A value 'no' from a config file is not passed on, so the script's own "
         "Accelerator(mixed_precision=...) still decides.", "choice",
         ("no", "fp16", "bf16", "fp8"), config=(_TOP, "mixed_precision"),
         env="ACCELERATE_MIXED_PRECISION"),
    Flag(("--gpu_ids",), "Comma-separated CUDA device ids this machine uses, or 'all' "
         "(sets CUDA_VISIBLE_DEVICES).", config=(_TOP, "gpu_ids"), metavar="IDS"),
    Flag(("--enable_cpu_affinity",), "Pin each worker to the cores nearest its GPU "
         "(ACCELERATE_CPU_AFFINITY).", "switch", default=False,
         config=(_TOP, "enable_cpu_affinity"), env="ACCELERATE_CPU_AFFINITY"),
    Flag(("--num_cpu_threads_per_process",), "OMP_NUM_THREADS of each worker (default: keep the "
         "one set, else cores // local processes).", "int", metavar="N"),
    Flag(("--downcast_bf16",), "On XLA devices store fp32 as bf16 (ACCELERATE_DOWNCAST_BF16); "
         "passed on, no effect elsewhere.", "switch", default=False,
         config=(_TOP, "downcast_bf16"), env="ACCELERATE_DOWNCAST_BF16"),
))

_PROCESSES = Group("processes and machines", "How many workers, on how many machines.", (
    Flag(("--num_processes",), "Total processes over all machines (default: CUDA devices per "
         "machine times --num_machines, or 1 per machine without CUDA).", "int",
         config=(_TOP, "num_processes"), metavar="N"),
    Flag(("--num_machines",), "Number of machines taking part (default 1; under srun, "
         "$SLURM_NNODES).", "int", default=1, config=(_TOP, "num_machines"), metavar="N"),
    Flag(("--machine_rank",), "Rank of this machine, 0 .. --num_machines - 1 (default 0; under "
         "srun, $SLURM_NODEID).", "int", default=0, config=(_TOP, "machine_rank"),
         metavar="RANK"),
    Flag(("--main_process_ip",), "Address of the machine with rank 0 (default 127.0.0.1; "
         "required with --num_machines > 1 unless srun tells it).",
         config=(_TOP, "main_process_ip"), metavar="IP"),
    Flag(("--main_process_port",), "Rendezvous port on the rank-0 machine (default: a free "
         "port; required with --num_machines > 1 unless srun tells it: $MASTER_PORT, else "
         "one derived from $SLURM_JOB_ID).", "int",
         config=(_TOP, "main_process_port"), metavar="PORT"),
    Flag(("--min_machines",), "Elastic membership: the fewest machines the job runs on "
         "(torchrun's --nnodes MIN:MAX). The job starts once MIN machines have joined (more "
         "may join until --max_machines) and, with --max_restarts, goes on after a machine "
         "is lost while at least MIN are left, its workers restarted at the new world size "
         "(resume them with load_state()). A range needs the c10d rendezvous (the default "
         "static one is switched). Default: --num_machines.", "int",
         config=(_TOP, "min_machines"), metavar="MIN"),
    Flag(("--max_machines",), "Elastic membership: the most machines the job runs on "
         "(default: --num_machines; --num_machines left out becomes MAX). --num_processes "
         "still counts the processes of --num_machines machines: the processes per machine "
         "are fixed, the machines vary.", "int", config=(_TOP, "max_machines"),
         metavar="MAX"),
    Flag(("--same_network",), "All machines are on the same local network (accepted for "
         "Accelerate configs; the rendezvous does not need it).", "switch", default=False,
         config=(_TOP, "same_network")),
))

_ELASTIC = Group("torch elastic (torchrun) options", "Rendezvous, restarts and worker logs.", (
    Flag(("--rdzv_backend",), "Rendezvous backend: static (default) or c10d. --max_restarts > 0 "
         "switches static to c10d, which restarts need.", default="static",
         config=(_TOP, "rdzv_backend"), metavar="BACKEND"),
    Flag(("--rdzv_endpoint",), "HOST:PORT of the rendezvous when it is not machine 0 (torchrun's "
         "--rdzv-endpoint; e.g. a host that outlives the training machines, with c10d). "
         "Default: --main_process_ip:--main_process_port.", config=(_TOP, "rdzv_endpoint"),
         metavar="HOST:PORT"),
    Flag(("--rdzv_id",), "Job id in the rendezvous, the same on every machine (torchrun's "
         "--rdzv-id). Default: $SLURM_JOB_ID, else one derived from the endpoint.",
         config=(_TOP, "rdzv_id"), metavar="ID"),
    Flag(("--local_addr",), "Address of this machine that the others use to reach it "
         "(torchrun's --local-addr). Default: with c10d, the address this machine reaches "
         "the rendezvous from; else torch's lookup of the hostname.",
         config=(_TOP, "local_addr"), metavar="ADDR"),
    Flag(("--rdzv_conf",), "Extra rendezvous settings, e.g. timeout=60,read_timeout=30.",
         default="", metavar="K=V,..."),
    Flag(("--rdzv_timeout",), "Seconds the machines of a multi-machine launch have to join "
         "before the launch fails naming the missing ones (default 300, 5 minutes); a machine "
         "that cannot reach machine 0's address at all fails after at most 45 s of it. "
         "Progress is printed every tenth of it (5 to 30 s) while machines are missing.",
         "float",
         default=300.0, config=(_TOP, "rdzv_timeout"), metavar="SECONDS"),
    Flag(("--max_restarts",), "Restart the worker group up to N times after a failure; with "
         "load_state() the job continues from the newest verified checkpoint (default 0).",
         "int", default=0, metavar="N"),
    Flag(("--monitor_interval",), "How often the agent checks the workers, in seconds "
         "(default 0.1).", "float", default=0.1, metavar="SECONDS"),
    Flag(("--stall_timeout",), "Seconds with no step (Accelerator.backward call) on any rank "
         "of this machine, counted from the first step, before the launcher dumps every "
         "rank's Python stack, names the rank that stopped first and ends the job (exit code "
         "124); off disables it. Default: stall_timeout in the config file, else "
         "$ACCEL_STALL_TIMEOUT, else 1800. Multi-process launches only.",
         config=(_TOP, "stall_timeout"), metavar="SECONDS|off"),
    Flag(("--startup_timeout",), "Seconds from the launch to the first step (the "
         "rendezvous, init_process_group, the first collective, loading, the first compile) "
         "before the launcher dumps every rank's Python stack and ends the job (exit code 124), "
         "as --stall_timeout does once steps have begun: a machine that died while the job was "
         "starting leaves the others blocked there. off disables it. Default: startup_timeout "
         "in the config file, else 1800. Multi-process launches only.",
         config=(_TOP, "startup_timeout"), metavar="SECONDS|off"),
    Flag(("--log_dir",), "Directory for the workers' log files (default: a temporary one).",
         metavar="DIR"),
    Flag(("-t", "--tee"), "Also write worker output to log files: 0 none, 1 stdout, 2 stderr, "
         "3 both, or per rank like 0:3,1:1.", default="0", metavar="STD"),
    Flag(("--role",), "Name of the worker role in torch elastic's logs.", default="default",
         metavar="NAME"),
))

_SCRIPT = Group("script", "How SCRIPT is run.", (
    Flag(("-m", "--module"), "SCRIPT is a module name, run as `python -m SCRIPT`.", "switch",
         default=False),
    Flag(("--no_python",), "Run SCRIPT directly instead of with `python` (any executable).",
         "switch", default=False),
    Flag(("--main_training_function",), "Name of the script's main function (Accelerate uses it "
         "for TPU only; accepted and ignored).", default="main",
         config=(_TOP, "main_training_function"), metavar="NAME"),
    Flag(("--mpirun_hostfile",), "Accelerate's MPI hostfile for multi-CPU runs: refused, accel "
         "starts CPU workers itself (--cpu --num_processes N; for many machines run `accel "
         "launch` on each, or under srun/mpirun with one launcher per machine).",
         config=("mpirun_config", "mpirun_hostfile"), metavar="PATH"),
    Flag(("--mpirun_ccl",), "oneCCL worker threads of Accelerate's mpirun launch: refused "
         "with --mpirun_hostfile.", "int", metavar="N", unsupported=(
             "oneCCL worker threads belong to Accelerate's mpirun launch (--mpirun_hostfile), "
             "which accel replaces: `accel launch --cpu --num_processes N` starts the CPU "
             "workers itself (gloo); for many machines run `accel launch` once per machine "
             "(it detects srun and mpirun).")),
))

_STRATEGY = Group("strategy (accel's own)", "Not in Accelerate: name a registered strategy "
                  "or preset and give it options, with no code and no variable to set.", (
    Flag(("--strategy",), "Registered strategy or preset the workers build (ACCEL_STRATEGY) "
         "instead of choosing one from the configuration: a third-party strategy's entry-point "
         "name, or a built-in (single, ddp, fsdp, nd, pipeline, deepspeed, zero1, zero2, "
         "zero3). An unknown name is refused before any worker starts, listing the "
         "registered ones (`accel strategies` lists them with their options).",
         config=(_TOP, "strategy"), env="ACCEL_STRATEGY", metavar="NAME"),
    Flag(("--strategy_config",), "Options of --strategy as a JSON object (a mapping under "
         "strategy_config: in the config file), passed as ACCEL_STRATEGY_CONFIG: built into "
         "the options dataclass the strategy declares when the script passed none of that kind "
         "(the script's wins); an unknown option or a value of the wrong type is refused "
         "before any worker starts, naming the key, the value and the expected type.",
         "mapping", config=(_TOP, "strategy_config"), env="ACCEL_STRATEGY_CONFIG",
         metavar="JSON"),
))

CORE_GROUPS = (_LAUNCHER, _HARDWARE, _PROCESSES, _ELASTIC, _STRATEGY, _SCRIPT)
