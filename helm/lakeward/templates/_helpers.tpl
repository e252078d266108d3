{{/* Chart name, truncated to 63 characters (a DNS label). */}}
{{- define "lakeward.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name: release-chart, unless the release name already holds the chart name. */}}
{{- define "lakeward.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "lakeward.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "lakeward.selectorLabels" -}}
app.kubernetes.io/name: {{ include "lakeward.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "lakeward.labels" -}}
helm.sh/chart: {{ include "lakeward.chart" . }}
{{ include "lakeward.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: lakeward
{{- end }}

{{- define "lakeward.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "lakeward.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The image reference: repository@digest when a digest is given, else repository:tag. */}}
{{- define "lakeward.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* Secret holding the API tokens. */}}
{{- define "lakeward.apiTokensSecret" -}}
{{- default (include "lakeward.fullname" .) .Values.apiTokens.existingSecret }}
{{- end }}

{{/* Secret holding the ZooKeeper digest credentials. */}}
{{- define "lakeward.zookeeperSecret" -}}
{{- default (include "lakeward.fullname" .) .Values.zookeeperAuth.existingSecret }}
{{- end }}

{{/* Whether the chart creates its own Secret (some secret value given inline). */}}
{{- define "lakeward.createSecret" -}}
{{- if or (and .Values.apiTokens.values (not .Values.apiTokens.existingSecret)) (and .Values.zookeeperAuth.enabled (not .Values.zookeeperAuth.existingSecret)) }}true{{- end }}
{{- end }}

{{/* Mount points of the writable volumes (the root filesystem is read-only). */}}
{{- define "lakeward.scratchDir" -}}/scratch{{- end }}
{{- define "lakeward.sparkLocalDir" -}}/scratch/spark-local{{- end }}
{{- define "lakeward.configDir" -}}/etc/lakeward{{- end }}

{{/*
The daemon's settings file: .Values.settings plus what the chart owns (http, spark.local.dir and
the Spark-on-Kubernetes conf). Secrets are never written here; they come from the environment.
*/}}
{{- define "lakeward.settings" -}}
{{- $s := deepCopy .Values.settings }}
{{- $_ := set $s "http" (dict "host" "0.0.0.0" "port" (int .Values.http.port) "protect_reads" .Values.http.protectReads) }}
{{- $spark := deepCopy (default (dict) $s.spark) }}
{{- $conf := deepCopy (default (dict) $spark.conf) }}
{{- $_ = set $conf "spark.local.dir" (include "lakeward.sparkLocalDir" .) }}
{{- if .Values.sparkOnKubernetes.enabled }}
{{- $k8s := .Values.sparkOnKubernetes }}
{{- $_ = set $spark "master" "k8s://https://kubernetes.default.svc:443" }}
{{- $_ = set $conf "spark.submit.deployMode" "client" }}
{{- $_ = set $conf "spark.kubernetes.namespace" .Release.Namespace }}
{{- $_ = set $conf "spark.kubernetes.container.image" (default (include "lakeward.image" .) $k8s.executorImage) }}
{{- $_ = set $conf "spark.kubernetes.executor.podTemplateFile" (printf "%s/executor-pod-template.yaml" (include "lakeward.configDir" .)) }}
{{- $_ = set $conf "spark.kubernetes.executor.podNamePrefix" (include "lakeward.fullname" .) }}
{{- $_ = set $conf "spark.kubernetes.authenticate.driver.serviceAccountName" (include "lakeward.serviceAccountName" .) }}
{{- $_ = set $conf "spark.executor.instances" ($k8s.executorInstances | toString) }}
{{- $_ = set $conf "spark.executor.cores" ($k8s.executorCores | toString) }}
{{- $_ = set $conf "spark.executor.memory" ($k8s.executorMemory | toString) }}
{{- $_ = set $conf "spark.driver.bindAddress" "0.0.0.0" }}
{{- $_ = set $conf "spark.driver.port" ($k8s.driverPort | toString) }}
{{- $_ = set $conf "spark.driver.blockManager.port" ($k8s.blockManagerPort | toString) }}
{{- range $key, $value := $k8s.conf }}
{{- $_ = set $conf $key ($value | toString) }}
{{- end }}
{{- end }}
{{- $_ = set $spark "conf" $conf }}
{{- $_ = set $s "spark" $spark }}
{{- toYaml $s }}
{{- end }}

{{/* Labels that select the daemon's pods (executor pods carry another component). */}}
{{- define "lakeward.daemonSelectorLabels" -}}
{{ include "lakeward.selectorLabels" . }}
app.kubernetes.io/component: daemon
{{- end }}
