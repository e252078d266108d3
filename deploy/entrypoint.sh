#!/usr/bin/env bash
# Entry point of the lakeward image (run under tini).
#   no arguments, or `serve ...`  the daemon: lakeward serve ...
#   executor                      a Spark executor: with Spark on Kubernetes the daemon's
#                                 SparkSession starts executor pods from this same image with the
#                                 single argument `executor` and describes the executor in SPARK_*
#                                 environment variables
#   anything else                 a lakeward CLI command, e.g. `tables` or `runs`
set -euo pipefail

if [[ $# -eq 0 ]]; then
  set -- serve
fi

if [[ $1 == executor ]]; then
  spark_jars="$(python -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')"
  # JVM options for the executor arrive numbered: SPARK_JAVA_OPT_0, SPARK_JAVA_OPT_1, ...
  java_opts=()
  i=0
  while true; do
    name="SPARK_JAVA_OPT_${i}"
    [[ -n ${!name+set} ]] || break
    java_opts+=("${!name}")
    i=$((i + 1))
  done
  classpath="${spark_jars}/*"
  if [[ -n ${SPARK_CLASSPATH:-} ]]; then
    classpath="${classpath}:${SPARK_CLASSPATH}"
  fi
  exec java "${java_opts[@]}" \
    -Xms"${SPARK_EXECUTOR_MEMORY}" -Xmx"${SPARK_EXECUTOR_MEMORY}" \
    -cp "${classpath}" \
    org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
    --driver-url "${SPARK_DRIVER_URL}" \
    --executor-id "${SPARK_EXECUTOR_ID}" \
    --cores "${SPARK_EXECUTOR_CORES}" \
    --app-id "${SPARK_APPLICATION_ID}" \
    --hostname "${SPARK_EXECUTOR_POD_IP}" \
    --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID}" \
    --podName "${SPARK_EXECUTOR_POD_NAME}"
fi

exec lakeward "$@"
