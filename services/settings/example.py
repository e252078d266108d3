"""The documented example configuration (it loads; docs/daemon.md shows it)."""

EXAMPLE_YAML = """\
# lakeward serve --config lakeward.yaml   (or LAKEWARD_CONFIG=lakeward.yaml)
# Any key can be overridden by an environment variable LAKEWARD_<SECTION>__<KEY>,
# e.g. LAKEWARD_ZOOKEEPER__HOSTS=zk1:2181 or LAKEWARD_HTTP__API_TOKENS=token1,token2.

tables:
  static:                      # tables named explicitly; name defaults to the path's last segment
    - path: /data/lake/orders
    - path: s3://lake/events
      name: events
  roots:                       # directories scanned for tables (folders with .hoodie/)
    - path: /data/lake/ingest
      max_depth: 2
      # group: ingest            # scheduling group of its tables (default: the folder's name)
  refresh_interval_s: 30       # one discovery cycle every 30 s ...
  refresh_jitter: 0.1          # ... give or take 10%

policies:
  defaults:                    # every table
    paused: false
    compaction:
      enabled: true
      max_delta_commits: 5     # schedule after 5 delta commits
    clean:
      enabled: true
      policy: KEEP_LATEST_COMMITS
      commits_retained: 10     # readers may read as of the last 10 commits
    clustering:
      enabled: false
      small_file_limit_bytes: 314572800
    archival:
      enabled: true
      keep_min_commits: 20
      keep_max_commits: 30
    change_tracking:
      enabled: false
    index_build:
      enabled: false
    hoodie_options:            # passed to the table as is (keys start with hoodie.)
      hoodie.parquet.compression.codec: zstd
  overrides:                   # per table name: only the keys that differ
    orders:
      compaction:
        max_delta_commits: 10
      clustering:
        enabled: true
        sort_columns: [customer_id]
      scheduling: {group: ingest, priority: 2}   # in the ingest group, twice a table's share of its runs
    events:
      paused: true

concurrency:
  max_running: 4               # plans at once on this replica
  max_running_per_table: 1
  timeouts_s:                  # seconds per run, by action
    compaction: 3600
    clustering: 7200
  retries:
    max_attempts: 3
    backoff_base_s: 5
    backoff_max_s: 300
  quarantine_after_failures: 3 # then it waits for `lakeward release`

scheduling:                    # priorities and fairness (docs/daemon.md, "Priorities and fairness")
  starving_score: 50           # a table whose health score is below this is scheduled first (null: off)
  groups:                      # per group: a discovery root's, or a policy's scheduling.group
    ingest: {priority: 3, max_concurrent_runs: 2}   # 3 runs for each run of a priority-1 group

resources:
  isolation: process           # each plan in a child (spark: in the driver process); thread: in the daemon
  max_memory_mb:               # MiB of resident memory per run, by action (null: unbounded)
    compaction: 4096
    clustering: 4096
  nice: 10                     # CPU priority of runs: the API answers first on busy cores
  terminate_grace_s: 3         # SIGTERM, then SIGKILL after this long

zookeeper:
  hosts: null                  # null: in-process coordinator (one replica only); else "zk1:2181,zk2:2181"
  chroot: /lakeward
  claims_path: /claims
  session_timeout_s: 30
  connection_timeout_s: 10
  # digest_user: lakeward      # digest auth; the password best from LAKEWARD_ZOOKEEPER__DIGEST_PASSWORD

spark:
  master: local[2]
  app_name: lakeward-services
  conf:
    spark.sql.shuffle.partitions: 8
  fair_scheduler: true
  engine: spark                # spark, or local (thread pool, no JVM: small tables)

http:
  host: 127.0.0.1              # 0.0.0.0 in a container
  port: 8080
  api_tokens: []               # best from LAKEWARD_HTTP__API_TOKENS; mutating calls need one
  # api_tokens:                # a token may be named (the audit log records the name; unnamed: token-1, ...)
  #   - {name: on-call, token: "..."}
  protect_reads: false

history:                       # the run history and audit log every replica shares (in ZooKeeper)
  runs_max_count: 1000         # keep the newest 1000 runs ...
  runs_max_age_s: 604800       # ... of at most 7 days
  audit_max_count: 5000
  audit_max_age_s: 2592000     # 30 days
  record_max_bytes: 4096       # one record's size cap (long errors are shortened)

log:
  format: json                 # json or text
  level: INFO

drain_time_s: 60               # on SIGTERM, running plans get this long before they are cancelled
# replica_id: lakeward-0       # default host-pid; LAKEWARD_REPLICA_ID=$(POD_NAME) in Kubernetes
"""
