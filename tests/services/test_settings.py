"""The daemon's settings: YAML, environment, precedence, validation messages, policy merging."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from lakeward.services.model import ServiceAction, TableRef
from lakeward.services.settings import ConfigurationError, DaemonSettings, SparkSettings, load_settings

DAEMON_DOC = Path(__file__).resolve().parents[2] / "docs" / "daemon.md"


def write(tmp_path: Path, data: dict | str) -> Path:
    path = tmp_path / "lakeward.yaml"
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data), encoding="utf-8")
    return path


def problems(path: Path | None = None, env: dict[str, str] | None = None) -> list[str]:
    with pytest.raises(ConfigurationError) as info:
        load_settings(path, env=env or {})
    return info.value.problems


def test_defaults_without_file_or_env() -> None:
    s = load_settings(env={})
    assert s.zookeeper.in_process and s.zookeeper.connect_string is None
    assert s.spark.master == "local[2]"
    assert (s.http.host, s.http.port) == ("127.0.0.1", 8080)
    assert s.log.format == "json" and s.log.level == "INFO"
    assert s.tables.static == [] and s.drain_time_s == 60


def test_yaml_only(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        {
            "tables": {
                "static": [{"path": "/lake/orders/"}, {"path": "s3://b/ev", "name": "events"}],
                "roots": [{"path": "/lake/ingest", "max_depth": 2}],
            },
            "zookeeper": {"hosts": ["zk1:2181", "zk2:2181"], "chroot": "/lw", "session_timeout_s": 12},
            "spark": {"master": "local[4]", "conf": {"spark.sql.shuffle.partitions": 8, "spark.ui.enabled": False}},
            "log": {"format": "TEXT", "level": "debug"},
        },
    )
    s = load_settings(path, env={})
    assert s.static_tables() == [TableRef("orders", "/lake/orders"), TableRef("events", "s3://b/ev")]
    assert s.tables.roots[0].max_depth == 2
    assert s.zookeeper.hosts == "zk1:2181,zk2:2181"
    assert s.zookeeper.connect_string == "zk1:2181,zk2:2181/lw"
    assert s.zookeeper.session_timeout_s == 12
    assert s.spark.conf == {"spark.sql.shuffle.partitions": "8", "spark.ui.enabled": "false"}
    assert (s.log.format, s.log.level) == ("text", "DEBUG")


def test_config_path_from_env(tmp_path: Path) -> None:
    path = write(tmp_path, {"drain_time_s": 5})
    assert load_settings(env={"LAKEWARD_CONFIG": str(path)}).drain_time_s == 5


def test_env_only_nested_and_case_insensitive() -> None:
    s = load_settings(
        env={
            "LAKEWARD_ZOOKEEPER__HOSTS": "zk1:2181,zk2:2181",
            "lakeward_zookeeper__session_timeout_s": "7.5",
            "LAKEWARD_HTTP__PORT": "9000",
            "LAKEWARD_HTTP__API_TOKENS": "tok-a, tok-b",
            "LAKEWARD_TABLES__STATIC": '[{"path": "/lake/a"}]',
            "LAKEWARD_POLICIES__OVERRIDES__A__PAUSED": "true",
            "LAKEWARD_SPARK__CONF": '{"spark.executor.memory": "2g"}',
            "LAKEWARD_DRAIN_TIME_S": "0",
            "OTHER_VAR": "ignored",
        }
    )
    assert s.zookeeper.hosts == "zk1:2181,zk2:2181" and not s.zookeeper.in_process
    assert s.zookeeper.session_timeout_s == 7.5
    assert s.http.port == 9000
    assert s.http.token_ok("tok-b") and not s.http.token_ok("tok-c") and not s.http.token_ok(None)
    assert s.static_tables() == [TableRef("a", "/lake/a")]
    assert s.policy_for("a").paused
    assert s.spark.conf == {"spark.executor.memory": "2g"}
    assert s.drain_time_s == 0
    assert load_settings(env={"LAKEWARD_HTTP__API_TOKENS": '["x", "y"]'}).http.token_ok("y")


def test_env_wins_over_yaml_key_by_key(tmp_path: Path) -> None:
    path = write(tmp_path, {"zookeeper": {"hosts": "yaml:2181", "chroot": "/from-yaml"}, "log": {"format": "text"}})
    s = load_settings(path, env={"LAKEWARD_ZOOKEEPER__HOSTS": "env:2181", "LAKEWARD_LOG__LEVEL": "WARNING"})
    assert s.zookeeper.hosts == "env:2181"
    assert s.zookeeper.chroot == "/from-yaml"  # the rest of the section stays
    assert (s.log.format, s.log.level) == ("text", "WARNING")


@pytest.mark.parametrize(
    ("data", "env", "expected"),
    [
        ({"zookeeper": {"session_timeout_s": 0}}, {}, "zookeeper.session_timeout_s: must be > 0"),
        ({}, {"LAKEWARD_ZOOKEEPER__SESSION_TIMEOUT_S": "-1"}, "zookeeper.session_timeout_s: must be > 0"),
        ({"concurrency": {"max_running": -2}}, {}, "concurrency.max_running: must be > 0"),
        ({"drain_time_s": -1}, {}, "drain_time_s: must be >= 0"),
        ({"http": {"port": "eighty"}}, {}, "http.port: must be a valid integer"),
        ({"http": {"port": 70000}}, {}, "http.port: must be <= 65535"),
        ({"http": {"host": "not a host!"}}, {}, "http.host: 'not a host!' is not a host name or an IP address"),
        ({}, {"LAKEWARD_HTTP__HOST": "a..b"}, "http.host: 'a..b' is not a host name or an IP address"),
        ({"tables": {"refresh_interval_s": "soon"}}, {}, "tables.refresh_interval_s: must be a valid number"),
        ({"zookeeper": {"host": "zk:2181"}}, {}, "zookeeper.host: unknown key"),
        ({"zookeper": {}}, {}, "zookeper: unknown key"),
        (
            {"policies": {"defaults": {"compaction": {"max_commits": 3}}}},
            {},
            "policies.defaults.compaction.max_commits: unknown key",
        ),
        (
            {"tables": {"static": [{"path": "/a/t"}, {"path": "/b/t"}]}},
            {},
            "tables.static[1].name: duplicate table name 't'",
        ),
        (
            {"tables": {"static": [{"path": "/a/t"}, {"path": "/a/t/", "name": "u"}]}},
            {},
            "tables.static[1].path: duplicate table path '/a/t'",
        ),
        ({"tables": {"static": [{"name": "x"}]}}, {}, "tables.static[0].path: required"),
        ({"tables": {"static": [{"path": "/a/b c"}]}}, {}, "tables.static[0].name: 'b c' is not a valid table name"),
        (
            {"tables": {"static": [{"path": "/a/t"}]}, "policies": {"overrides": {"nope": {"paused": True}}}},
            {},
            "policies.overrides.nope: unknown table 'nope'",
        ),
        (
            {"policies": {"defaults": {"hoodie_options": {"parquet.codec": "zstd"}}}},
            {},
            "policies.defaults.hoodie_options['parquet.codec']: option keys must start with 'hoodie.'",
        ),
        (
            {"policies": {"defaults": {"hoodie_options": {"hoodie.cleaner.commits.retained": 3}}}},
            {},
            "policies.defaults.hoodie_options['hoodie.cleaner.commits.retained']: set by the policy; "
            "use `clean.commits_retained` instead",
        ),
        (
            {"policies": {"defaults": {"hoodie_options": {"hoodie.nope.key": 1}}}},
            {},
            "policies.defaults.hoodie_options: unknown option 'hoodie.nope.key'",
        ),
        (
            {"policies": {"defaults": {"hoodie_options": {"hoodie.index.type": "WRONG"}}}},
            {},
            "policies.defaults.hoodie_options: option hoodie.index.type='WRONG' is invalid",
        ),
        (
            {
                "tables": {"static": [{"path": "/a/t"}]},
                "policies": {"overrides": {"t": {"hoodie_options": {"hoodie.write.lock.provider": "nope"}}}},
            },
            {},
            "policies.overrides.t.hoodie_options: ",
        ),
        ({"log": {"format": "xml"}}, {}, "log.format: must be 'json' or 'text'"),
        ({}, {"LAKEWARD_LOG__FORMAT": "yaml"}, "log.format: must be 'json' or 'text'"),
        ({"log": {"level": "LOUD"}}, {}, "log.level: must be 'DEBUG'"),
        (
            {"policies": {"defaults": {"archival": {"keep_min_commits": 40}}}},
            {},
            "policies.defaults.archival.keep_min_commits: must be < archival.keep_max_commits (30)",
        ),
        (
            {
                "tables": {"static": [{"path": "/a/t"}]},
                "policies": {"overrides": {"t": {"index_build": {"enabled": True}}}},
            },
            {},
            "policies.overrides.t.index_build.columns: required when index_build is enabled",
        ),
        ({"policies": {"defaults": {"clean": {"policy": "KEEP_ALL"}}}}, {}, "policies.defaults.clean.policy: must be"),
        (
            {"policies": {"defaults": {"health": {"weights": {"compaction": -1}}}}},
            {},
            "policies.defaults.health.weights.compaction: must be >= 0",
        ),
        (
            {"policies": {"defaults": {"health": {"thresholds": {"max_log_file": 3}}}}},
            {},
            "policies.defaults.health.thresholds.max_log_file: unknown key",
        ),
        (
            {
                "tables": {"static": [{"path": "/a/t"}]},
                "policies": {"overrides": {"t": {"health": {"thresholds": {"small_files_warning_share": 0.9}}}}},
            },
            {},
            "policies.overrides.t.health.thresholds: thresholds.small_files_warning_share (0.9) must not exceed",
        ),
        ({"tables": {"health_refresh_s": -1}}, {}, "tables.health_refresh_s: must be >= 0"),
        (
            {"concurrency": {"retries": {"backoff_base_s": 10, "backoff_max_s": 1}}},
            {},
            "concurrency.retries.backoff_max_s: must be >= backoff_base_s (10",
        ),
        (
            {"concurrency": {"max_running": 2, "max_running_per_table": 3}},
            {},
            "concurrency.max_running_per_table: must be <= max_running (2)",
        ),
        ({"concurrency": {"timeouts_s": {"compaction": 0}}}, {}, "concurrency.timeouts_s.compaction: must be > 0"),
        ({"resources": {"max_memory_mb": {"compaction": 0}}}, {}, "resources.max_memory_mb.compaction: must be > 0"),
        ({"resources": {"max_memory_mb": {"compactoin": 10}}}, {}, "resources.max_memory_mb.compactoin: unknown key"),
        ({"resources": {"terminate_grace_s": 0}}, {}, "resources.terminate_grace_s: must be > 0"),
        ({}, {"LAKEWARD_RESOURCES__ISOLATION": "fork"}, "resources.isolation"),
        ({"zookeeper": {"chroot": "lakeward"}}, {}, "zookeeper.chroot: must be an absolute ZooKeeper path"),
        ({"zookeeper": {"hosts": "zk1:2181,,zk2"}}, {}, "zookeeper.hosts: must be host:port"),
        ({"zookeeper": {"digest_user": "u"}}, {}, "zookeeper.digest_password: digest_user and digest_password go"),
        ({"http": {"protect_reads": True}}, {}, "http.protect_reads: needs at least one entry in api_tokens"),
        ({"http": {"api_tokens": [""]}}, {}, "http.api_tokens[0]: a token must be non-empty"),
        ({"spark": {"conf": {"spark.x": [1]}}}, {}, "spark.conf.spark.x: must be a valid string"),
        (
            {"spark": {"conf": {"spark.driver.memory": "4g"}}},
            {},
            "resources.max_memory_mb.rollback: 2048 MiB is not above spark.driver.memory (4096 MiB)",
        ),
        ({"spark": {"conf": {"spark.driver.memory": "lots"}}}, {}, "conf.spark.driver.memory: 'lots' is not a size"),
        ({}, {"LAKEWARD_TABLES__STATIC": "not json"}, "tables: cannot parse a LAKEWARD_* environment value as JSON"),
    ],
)
def test_every_error_names_its_key(tmp_path: Path, data: dict, env: dict[str, str], expected: str) -> None:
    found = problems(write(tmp_path, data), env)
    assert any(p.startswith(expected) for p in found), found


def test_all_problems_are_reported_together(tmp_path: Path) -> None:
    found = problems(write(tmp_path, {"zookeeper": {"session_timeout_s": -1}, "http": {"port": -1}, "extra": 1}))
    assert {p.split(":")[0] for p in found} == {"zookeeper.session_timeout_s", "http.port", "extra"}
    with pytest.raises(ConfigurationError, match=r"invalid lakeward configuration:\n  "):
        load_settings(write(tmp_path, {"http": {"port": -1}}), env={})


def test_bad_files(tmp_path: Path) -> None:
    assert problems(tmp_path / "missing.yaml")[0].startswith(f"{tmp_path / 'missing.yaml'}: cannot read")
    assert "not valid YAML" in problems(write(tmp_path, "tables: [unclosed"))[0]
    assert "top level must be a mapping" in problems(write(tmp_path, "- a\n- b\n"))[0]
    assert load_settings(write(tmp_path, ""), env={}) == load_settings(env={})
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\xff\xfe not utf-8")
    assert problems(binary) == [f"{binary}: not UTF-8 text (byte 0xff at offset 0)"]


@pytest.mark.parametrize("host", ["127.0.0.1", "0.0.0.0", "::", "::1", "localhost", "lakeward-0.svc.local", "my_host"])
def test_http_host_takes_ip_addresses_and_host_names(tmp_path: Path, host: str) -> None:
    assert load_settings(write(tmp_path, {"http": {"host": host}}), env={}).http.host == host


MISSES = "hoodie.client.heartbeat.tolerable.misses"


def test_policy_merging(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        {
            "tables": {"static": [{"path": "/lake/orders"}, {"path": "/lake/events"}]},
            "policies": {
                "defaults": {
                    "compaction": {"max_delta_commits": 8},
                    "archival": {"keep_min_commits": 50, "keep_max_commits": 100},
                    "hoodie_options": {"hoodie.parquet.compression.codec": "zstd", MISSES: 1},
                },
                "overrides": {
                    "orders": {
                        "compaction": {"enabled": False},
                        "archival": {"keep_min_commits": 60},  # valid only against the defaults' max
                        "clustering": {"enabled": True, "sort_columns": ["customer"]},
                        "hoodie_options": {MISSES: 2},
                    },
                    "events": {"paused": True},
                },
            },
        },
    )
    s = load_settings(path, env={})
    orders = s.policy_for("orders")
    assert orders.table == "orders"
    assert not orders.compaction.enabled and orders.compaction.max_delta_commits == 8
    assert (orders.archival.keep_min_commits, orders.archival.keep_max_commits) == (60, 100)
    assert orders.hoodie_options == {"hoodie.parquet.compression.codec": "zstd", MISSES: 2}
    assert orders.schedules(ServiceAction.CLUSTERING) and not orders.schedules(ServiceAction.COMPACTION)
    assert not orders.schedules(ServiceAction.ROLLBACK) and orders.for_action(ServiceAction.ROLLBACK) is None
    options = orders.table_options()
    assert options["hoodie.keep.min.commits"] == "60"
    assert options["hoodie.clustering.plan.strategy.sort.columns"] == "customer"
    assert options[MISSES] == "2"

    events = s.policy_for("events")
    assert events.paused and not events.schedules(ServiceAction.CLEAN)
    assert events.compaction.max_delta_commits == 8

    # A table with no override (e.g. found by discovery) gets the defaults.
    other = s.policy_for("discovered")
    assert other.compaction.enabled and other.compaction.max_delta_commits == 8
    assert not other.clustering.enabled and other.schedules(ServiceAction.CLEAN)
    assert s.policy_for("orders") is orders  # cached


def test_overrides_for_discovered_tables_allowed_with_roots(tmp_path: Path) -> None:
    path = write(
        tmp_path, {"tables": {"roots": [{"path": "/lake"}]}, "policies": {"overrides": {"found": {"paused": True}}}}
    )
    assert load_settings(path, env={}).policy_for("found").paused


def test_helpers() -> None:
    s = load_settings(env={"LAKEWARD_SPARK__POOLS": '["fast", "compaction"]'})
    assert s.spark.pool_for(ServiceAction.COMPACTION) == "compaction"
    assert s.spark.pool_for(ServiceAction.CLEAN) == "fast"
    assert s.concurrency.timeouts_s.for_action(ServiceAction.CLUSTERING) == 7200
    retries = s.concurrency.retries
    assert [retries.backoff_s(n) for n in (1, 2, 3, 10)] == [5, 10, 20, 300]


def test_example_yaml_loads_and_is_in_the_daemon_docs(tmp_path: Path) -> None:
    example = DaemonSettings.example_yaml()
    s = load_settings(write(tmp_path, example), env={})
    assert s.policy_for("orders").compaction.max_delta_commits == 10
    assert s.policy_for("events").paused
    block = re.search(r"```yaml\n(.*?)```", DAEMON_DOC.read_text(encoding="utf-8"), re.S)
    assert block is not None and block.group(1) == example


def test_secrets_not_printed(tmp_path: Path) -> None:
    s = load_settings(
        env={
            "LAKEWARD_ZOOKEEPER__HOSTS": "zk:2181",
            "LAKEWARD_ZOOKEEPER__DIGEST_USER": "svc",
            "LAKEWARD_ZOOKEEPER__DIGEST_PASSWORD": "zk-pass-123",
            "LAKEWARD_HTTP__API_TOKENS": "api-token-456",
        }
    )
    for text in (repr(s), str(s), s.model_dump_json(), repr(s.zookeeper), repr(s.http)):
        assert "zk-pass-123" not in text and "api-token-456" not in text
    assert s.zookeeper.digest_password is not None
    assert s.zookeeper.digest_password.get_secret_value() == "zk-pass-123"
    assert s.http.token_ok("api-token-456")
    # nor in error messages about other keys
    path = write(tmp_path, {"zookeeper": {"hosts": "zk:2181", "digest_user": "u", "digest_password": "pw-789"}})
    found = problems(path, {"LAKEWARD_HTTP__PORT": "x"})
    assert not any("pw-789" in p for p in found)


def test_settings_are_frozen() -> None:
    s = load_settings(env={})
    with pytest.raises(ValueError):
        s.drain_time_s = 3  # type: ignore[misc]


def test_api_tokens_have_names_and_bare_tokens_stay_valid(tmp_path: Path) -> None:
    named = load_settings(
        write(tmp_path, {"http": {"api_tokens": [{"name": "on-call", "token": "tok-a"}, "tok-b"]}}), env={}
    )
    assert named.http.token_name("tok-a") == "on-call" and named.http.token_name("tok-b") == "token-2"
    assert named.http.token_name("tok-c") is None and named.http.token_ok("tok-b")
    assert "tok-a" not in repr(named.http)
    from_env = load_settings(env={"LAKEWARD_HTTP__API_TOKENS": '[{"name": "ci", "token": "x"}, "y"]'})
    assert [(t.name, t.get_secret_value()) for t in from_env.http.api_tokens] == [("ci", "x"), ("token-2", "y")]
    with pytest.raises(ConfigurationError, match=r"http.api_tokens\[1\].name: 'a' names two tokens"):
        load_settings(
            write(tmp_path, {"http": {"api_tokens": [{"name": "a", "token": "1"}, {"name": "a", "token": "2"}]}}),
            env={},
        )


def test_history_retention_settings(tmp_path: Path) -> None:
    s = load_settings(write(tmp_path, {"history": {"runs_max_count": 10, "audit_max_age_s": 60}}), env={})
    assert (s.history.runs_max_count, s.history.audit_max_age_s, s.history.runs_max_age_s) == (10, 60, 7 * 86400)
    with pytest.raises(ConfigurationError, match=r"history.record_max_bytes: must be >= 512"):
        load_settings(write(tmp_path, {"history": {"record_max_bytes": 10}}), env={})


def test_spark_run_memory_bounds_must_be_above_the_drivers_heap(tmp_path: Path) -> None:
    """On the Spark engine a run's bound holds for the driver's processes, its JVM heap included."""
    bounds = {a.value: 5000 for a in ServiceAction}
    big_driver = {"spark": {"conf": {"spark.driver.memory": "4096m"}}, "resources": {"max_memory_mb": bounds}}
    assert load_settings(write(tmp_path, big_driver), env={}).spark.driver_memory_mib() == 4096
    bounds["clean"] = 4096
    with pytest.raises(ConfigurationError, match=r"resources.max_memory_mb.clean: 4096 MiB is not above"):
        load_settings(write(tmp_path, big_driver), env={})
    bounds["clean"] = None  # unbounded
    load_settings(write(tmp_path, big_driver), env={})
    # the local engine, or runs in the daemon's threads: no driver process to bound
    for other in ({"engine": "local"}, {"engine": "spark"}):
        small = {"spark": {**other, "conf": {"spark.driver.memory": "8g"}}, "resources": {"isolation": "thread"}}
        load_settings(write(tmp_path, small), env={})
    local = {"spark": {"engine": "local", "conf": {"spark.driver.memory": "8g"}}}
    load_settings(write(tmp_path, local), env={})
    sizes = {"512": 512, "1g": 1024, "2G": 2048, "1048576k": 1024, "1gb": 1024, "1073741824b": 1024}
    for text, mib in sizes.items():
        assert SparkSettings(conf={"spark.driver.memory": text}).driver_memory_mib() == mib, text
    assert SparkSettings().driver_memory_mib() == 1024  # Spark's default


def test_resources_are_per_action_and_null_means_unbounded(tmp_path: Path) -> None:
    data = {"resources": {"isolation": "thread", "max_memory_mb": {"compaction": 512, "clean": None}}}
    s = load_settings(write(tmp_path, data), env={})
    assert s.resources.isolation == "thread"
    assert s.resources.max_memory_mb.for_action(ServiceAction.COMPACTION) == 512
    assert s.resources.max_memory_mb.for_action(ServiceAction.CLEAN) is None
    assert load_settings(None, env={}).resources.isolation == "process"  # the default


@pytest.mark.parametrize("second", ["file://{d}/a/t", "file://{d}/a/t/", "{d}/a/x/../t", "{d}/a//t"])
def test_a_table_listed_twice_in_two_spellings_is_a_duplicate(tmp_path: Path, second: str) -> None:
    d = str(tmp_path)
    data = {"tables": {"static": [{"path": f"{d}/a/t"}, {"path": second.format(d=d), "name": "again"}]}}
    found = problems(write(tmp_path, data))
    assert any(p.startswith("tables.static[1].path: duplicate table path") for p in found), found


def _float_keys(model: type, prefix: str = "") -> list[str]:
    """Every float setting's key (in nested sections), e.g. `zookeeper.session_timeout_s`."""
    from pydantic import BaseModel

    keys = []
    for name, field in model.model_fields.items():  # type: ignore[attr-defined]
        ann = field.annotation
        args = getattr(ann, "__args__", ())
        if ann is float or float in args:
            keys.append(prefix + name)
        elif isinstance(ann, type) and issubclass(ann, BaseModel):
            keys.extend(_float_keys(ann, f"{prefix}{name}."))
    return keys


def _nest(key: str, value: object) -> dict:
    data: dict = {}
    node = data
    *parents, leaf = key.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value
    return data


FLOAT_KEYS = _float_keys(DaemonSettings)


def test_float_keys_cover_every_section() -> None:
    assert {"drain_time_s", "zookeeper.connection_timeout_s", "tables.refresh_interval_s"} <= set(FLOAT_KEYS)
    assert "policies.defaults.health.weights.compaction" in FLOAT_KEYS


@pytest.mark.parametrize("key", FLOAT_KEYS)
@pytest.mark.parametrize("value", [".inf", "-.inf", ".nan"])
def test_no_float_setting_takes_infinity_or_nan(tmp_path: Path, key: str, value: str) -> None:
    # `drain_time_s: .inf` passed, and SIGTERM then crashed the drain (Event.wait(inf): OverflowError).
    parsed = yaml.safe_load(value)
    found = problems(write(tmp_path, _nest(key, parsed)))
    assert any(p.startswith(f"{key}: must be a finite number") for p in found), found


def test_an_infinite_drain_time_from_the_environment_is_refused() -> None:
    assert problems(env={"LAKEWARD_DRAIN_TIME_S": "inf"}) == ["drain_time_s: must be a finite number"]


def test_valid_hoodie_options_and_the_daemons_zookeeper_lock_load(tmp_path: Path) -> None:
    data = {
        "tables": {"static": [{"path": "/a/t"}]},
        "zookeeper": {"hosts": "zk1:2181"},
        "policies": {
            "defaults": {"hoodie_options": {"hoodie.index.type": "BLOOM", "hoodie.parquet.compression.codec": "zstd"}},
            "overrides": {"t": {"hoodie_options": {"hoodie.write.lock.provider": "zookeeper"}}},
        },
    }
    settings = load_settings(write(tmp_path, data), env={})
    assert settings.policy_for("t").hoodie_options["hoodie.write.lock.provider"] == "zookeeper"


def test_null_from_the_environment_turns_a_nullable_setting_off() -> None:
    # docs: `LAKEWARD_SCHEDULING__STARVING_SCORE=null` turns starvation off; it was "must be a valid number".
    assert load_settings(env={"LAKEWARD_SCHEDULING__STARVING_SCORE": "null"}).scheduling.starving_score is None


def test_an_environment_variable_for_an_unknown_section_is_an_error() -> None:
    # LAKEWARD_HTTPS__PORT=1 (a typo of http) was ignored; a plain LAKEWARD_X stays another tool's business.
    assert problems(env={"LAKEWARD_HTTPS__PORT": "1"}) == [
        "https: unknown key (from the environment variable LAKEWARD_HTTPS__PORT)"
    ]
    assert problems(env={"lakeward_zookeper__hosts": "zk:2181"})[0].startswith("zookeper: unknown key")
    assert load_settings(env={"LAKEWARD_PY": "/usr/bin/python3", "LAKEWARD_URL": "http://x"}) == load_settings(env={})
