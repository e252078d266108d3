pytest_plugins = [
    "tests.support.zookeeper",
    "tests.support.seaweedfs",
    "tests.support.fixture_tables",
    "tests.support.spark",
]
