{{/* Names and labels. */}}
{{- define "newsmon.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "newsmon.fullname" -}}
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

{{- define "newsmon.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "newsmon.selectorLabels" -}}
app.kubernetes.io/name: {{ include "newsmon.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "newsmon.labels" -}}
helm.sh/chart: {{ include "newsmon.chart" . }}
{{ include "newsmon.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: newsmon
{{- end }}

{{/* Labels of one component: (dict "root" $ "component" "classifier"). */}}
{{- define "newsmon.componentLabels" -}}
{{ include "newsmon.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "newsmon.componentSelectorLabels" -}}
{{ include "newsmon.selectorLabels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "newsmon.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "newsmon.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "newsmon.configMapName" -}}
{{ include "newsmon.fullname" . }}-config
{{- end }}

{{- define "newsmon.secretName" -}}
{{- if .Values.secrets.existingSecret }}
{{- .Values.secrets.existingSecret }}
{{- else }}
{{- include "newsmon.fullname" . }}-secret
{{- end }}
{{- end }}

{{- define "newsmon.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag | toString) }}
{{- end }}

{{/* The settings that are secret: they go in the Secret, never in the ConfigMap. */}}
{{- define "newsmon.secretKeys" -}}
NEWSMON_KAFKA__SASL_PASSWORD NEWSMON_MEMORY__API_KEY NEWSMON_WORKER__REDIS_URL NEWSMON_TRAINING__OPTUNA_STORAGE NEWSMON_API__TOKEN
{{- end }}

{{/* Settings the chart derives from other values (home.mountPath, metrics.port, api.port, kafkaCa). */}}
{{- define "newsmon.derivedKeys" -}}
NEWSMON_HOME NEWSMON_WORKER__HTTP_PORT NEWSMON_API__HOST NEWSMON_API__PORT HF_HOME HOME
{{- end }}

{{/* A value as an environment variable's text: maps and lists as JSON, whole numbers without an exponent
     (YAML numbers reach the templates as float64, and 2000000 would print as 2e+06). */}}
{{- define "newsmon.envText" -}}
{{- if or (kindIs "map" .) (kindIs "slice" .) }}
{{- toJson . }}
{{- else if and (kindIs "float64" .) (eq (float64 .) (floor .)) }}
{{- int64 . | toString }}
{{- else }}
{{- toString . }}
{{- end }}
{{- end }}

{{/* Refuse secret or derived settings in a config map of values: (dict "config" $map "where" "config"). */}}
{{- define "newsmon.checkConfig" -}}
{{- $secret := splitList " " (include "newsmon.secretKeys" .root) }}
{{- $derived := splitList " " (include "newsmon.derivedKeys" .root) }}
{{- range $k, $v := .config }}
{{- if has $k $secret }}
{{- fail (printf "%s.%s is a secret setting: set it in secrets.values (or secrets.existingSecret), not in %s" $.where $k $.where) }}
{{- end }}
{{- if has $k $derived }}
{{- fail (printf "%s.%s is set by the chart (home.mountPath, metrics.port, api.port): remove it from %s" $.where $k $.where) }}
{{- end }}
{{- if and (eq $k "NEWSMON_KAFKA__SSL_CA_LOCATION") $.root.Values.kafkaCa.secretName }}
{{- fail (printf "%s.%s is set by the chart when kafkaCa.secretName is set: remove one of them" $.where $k) }}
{{- end }}
{{- end }}
{{- end }}

{{/* Environment of one container: (dict "root" $ "config" .Values.classifier.config "where" "classifier.config").
     envFrom gives the ConfigMap and the Secret; explicit env entries (component overrides) win over them. */}}
{{- define "newsmon.envFrom" -}}
- configMapRef:
    name: {{ include "newsmon.configMapName" . }}
- secretRef:
    name: {{ include "newsmon.secretName" . }}
{{- end }}

{{- define "newsmon.env" -}}
{{- include "newsmon.checkConfig" . -}}
- name: HOME
  value: /tmp
{{- range $k, $v := .derived }}
- name: {{ $k }}
  value: {{ include "newsmon.envText" $v | quote }}
{{- end }}
{{- range $k, $v := .config }}
{{- if not (kindIs "invalid" $v) }}
- name: {{ $k }}
  value: {{ include "newsmon.envText" $v | quote }}
{{- end }}
{{- end }}
{{- with .root.Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The PVC of the home volume, or "" for an emptyDir. */}}
{{- define "newsmon.homeClaim" -}}
{{- if .Values.home.existingClaim }}
{{- .Values.home.existingClaim }}
{{- else if .Values.home.create }}
{{- include "newsmon.fullname" . }}-home
{{- end }}
{{- end }}

{{/* Volumes of a pod: (dict "root" $ "data" <volume source of the training corpus>). */}}
{{- define "newsmon.volumes" -}}
{{- $claim := include "newsmon.homeClaim" .root -}}
- name: home
{{- if $claim }}
  persistentVolumeClaim:
    claimName: {{ $claim }}
{{- else }}
  emptyDir:
    {{- with .root.Values.home.sizeLimit }}
    sizeLimit: {{ . }}
    {{- end }}
{{- end }}
- name: tmp
  emptyDir:
    {{- with .root.Values.tmpSizeLimit }}
    sizeLimit: {{ . }}
    {{- end }}
{{- with .root.Values.kafkaCa.secretName }}
- name: kafka-ca
  secret:
    secretName: {{ . }}
    items:
      - key: {{ $.root.Values.kafkaCa.key }}
        path: ca.crt
{{- end }}
{{- with .data }}
- name: data
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .root.Values.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Mounts of a container: (dict "root" $ "data" <volume source of the training corpus>). */}}
{{- define "newsmon.volumeMounts" -}}
- name: home
  mountPath: {{ .root.Values.home.mountPath }}
- name: tmp
  mountPath: /tmp
{{- if .root.Values.kafkaCa.secretName }}
- name: kafka-ca
  mountPath: /etc/newsmon/kafka-ca
  readOnly: true
{{- end }}
{{- if .data }}
- name: data
  mountPath: /data
  readOnly: true
{{- end }}
{{- with .root.Values.extraVolumeMounts }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Resources with the GPU added: (dict "resources" .resources "gpu" .gpu). */}}
{{- define "newsmon.resources" -}}
{{- $res := deepCopy (default dict .resources) }}
{{- if and .gpu (gt (int .gpu.count) 0) }}
{{- $limits := default dict $res.limits }}
{{- $requests := default dict $res.requests }}
{{- $_ := set $limits .gpu.resourceName (int .gpu.count) }}
{{- $_ := set $requests .gpu.resourceName (int .gpu.count) }}
{{- $_ := set $res "limits" $limits }}
{{- $_ := set $res "requests" $requests }}
{{- end }}
{{- toYaml $res }}
{{- end }}

{{/* Checksums of the ConfigMap and Secret: pods restart when the settings change. */}}
{{- define "newsmon.checksums" -}}
checksum/config: {{ include (print $.Template.BasePath "/configmap.yaml") . | sha256sum }}
checksum/secret: {{ include (print $.Template.BasePath "/secret.yaml") . | sha256sum }}
{{- end }}

{{/* "true" in the embedded mode (no Qdrant server: config.NEWSMON_MEMORY__URL empty), else "". */}}
{{- define "newsmon.embedded" -}}
{{- if not (index .Values.config "NEWSMON_MEMORY__URL") }}true{{ end }}
{{- end }}

{{/* The worker components the chart runs: "worker" (both roles in one pod) in the embedded mode, else the
     enabled ones of "classifier" and "memory-updater". */}}
{{- define "newsmon.workerComponents" -}}
{{- if include "newsmon.embedded" . }}
{{- if .Values.classifier.enabled }}worker{{ end }}
{{- else }}
{{- $c := list }}
{{- if .Values.classifier.enabled }}{{ $c = append $c "classifier" }}{{ end }}
{{- if .Values.memoryUpdater.enabled }}{{ $c = append $c "memory-updater" }}{{ end }}
{{- join " " $c }}
{{- end }}
{{- end }}

{{/* Refuse deployments that split or lose the knowledge memory, or cannot work: one knowledge memory per
     deployment (issue "Deployable as built"). Called once, from the ConfigMap. */}}
{{- define "newsmon.checkDeployment" -}}
{{- $c := .Values.classifier }}
{{- if include "newsmon.embedded" . }}
{{- $why := "without a Qdrant server (config.NEWSMON_MEMORY__URL is empty) the knowledge memory is the embedded engine, a directory that one process locks, so" }}
{{- $fix := "set config.NEWSMON_MEMORY__URL to a Qdrant server" }}
{{- if $c.autoscaling.enabled }}
{{- fail (printf "classifier.autoscaling.enabled needs config.NEWSMON_MEMORY__URL: %s every replica the HPA adds would open its own memory and the knowledge memory would be split between them; %s, or turn the autoscaling off" $why $fix) }}
{{- end }}
{{- if gt (int $c.replicas) 1 }}
{{- fail (printf "classifier.replicas is %d but config.NEWSMON_MEMORY__URL is empty: %s each replica would open its own memory and the knowledge memory would be split between them (a moderator decision reaches one of them); %s, or run the embedded mode with classifier.replicas: 1 (one pod runs both roles)" (int $c.replicas) $why $fix) }}
{{- end }}
{{- if .Values.training.enabled }}
{{- fail (printf "training.enabled needs config.NEWSMON_MEMORY__URL: %s the nightly job cannot re-embed the memory that the worker pod holds; %s, or set training.enabled: false" $why $fix) }}
{{- end }}
{{- if .Values.api.enabled }}
{{- fail (printf "api.enabled needs config.NEWSMON_MEMORY__URL: %s the API pod cannot open the memory that the worker pod holds; %s" $why $fix) }}
{{- end }}
{{- if not (include "newsmon.homeClaim" .) }}
{{- fail "the embedded mode (config.NEWSMON_MEMORY__URL empty) keeps the knowledge memory in the home volume, and an emptyDir would lose it with the pod: set home.existingClaim or home.create (ReadWriteOnce is enough for the one pod), or set config.NEWSMON_MEMORY__URL to a Qdrant server" }}
{{- end }}
{{- end }}
{{- $rf := index .Values.config "NEWSMON_KAFKA__REPLICATION_FACTOR" }}
{{- $isr := index .Values.config "NEWSMON_KAFKA__MIN_INSYNC_REPLICAS" }}
{{- if and $rf $isr (gt (int $isr) (int $rf)) }}
{{- fail (printf "config.NEWSMON_KAFKA__MIN_INSYNC_REPLICAS (%d) exceeds NEWSMON_KAFKA__REPLICATION_FACTOR (%d): no write with acks=all could ever succeed" (int $isr) (int $rf)) }}
{{- end }}
{{- if and .Values.api.enabled .Values.api.auth.enabled (not .Values.secrets.existingSecret) (not .Values.secrets.values.NEWSMON_API__TOKEN) }}
{{- fail "api.auth.enabled needs a bearer token: set secrets.values.NEWSMON_API__TOKEN (or keep it in secrets.existingSecret), or set api.auth.enabled: false on a network where every client is trusted" }}
{{- end }}
{{- end }}

{{/* Replica guard: a consumer group gives each partition to one consumer. */}}
{{- define "newsmon.partitions" -}}
{{- include "newsmon.envText" (default 6 (index .Values.config "NEWSMON_KAFKA__TOPIC_PARTITIONS")) }}
{{- end }}

{{/* A Deployment of newsmon: (dict "root" $ "component" "classifier" "values" .Values.classifier
     "where" "classifier" "gpu" .Values.classifier.gpu "hpa" <bool>), optional "port" (of /healthz, /readyz,
     /metrics; default metrics.port) and "derived" (environment variables the chart sets, name -> value). */}}
{{- define "newsmon.workerDeployment" -}}
{{- $root := .root }}
{{- $v := .values }}
{{- $port := default $root.Values.metrics.port .port }}
{{- $sel := dict "root" $root "component" .component }}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ include "newsmon.fullname" $root }}-{{ .component }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "newsmon.componentLabels" $sel | nindent 4 }}
spec:
  {{- if not .hpa }}
  replicas: {{ $v.replicas }}
  {{- end }}
  revisionHistoryLimit: 5
  {{- with $v.strategy }}
  strategy:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  selector:
    matchLabels:
      {{- include "newsmon.componentSelectorLabels" $sel | nindent 6 }}
  template:
    metadata:
      labels:
        {{- include "newsmon.componentSelectorLabels" $sel | nindent 8 }}
        {{- with $v.podLabels }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      annotations:
        {{- include "newsmon.checksums" $root | nindent 8 }}
        {{- if $root.Values.metrics.podAnnotations }}
        prometheus.io/scrape: "true"
        prometheus.io/port: {{ $port | quote }}
        prometheus.io/path: /metrics
        {{- end }}
        {{- with $v.podAnnotations }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
    spec:
      serviceAccountName: {{ include "newsmon.serviceAccountName" $root }}
      automountServiceAccountToken: {{ $root.Values.automountServiceAccountToken }}
      {{- with $root.Values.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.priorityClassName }}
      priorityClassName: {{ . }}
      {{- end }}
      terminationGracePeriodSeconds: {{ $v.terminationGracePeriodSeconds }}
      securityContext:
        {{- toYaml $root.Values.podSecurityContext | nindent 8 }}
      containers:
        - name: {{ .component }}
          image: {{ include "newsmon.image" $root | quote }}
          imagePullPolicy: {{ $root.Values.image.pullPolicy }}
          command:
            {{- toYaml $v.command | nindent 12 }}
          ports:
            - name: http
              containerPort: {{ $port }}
              protocol: TCP
          envFrom:
            {{- include "newsmon.envFrom" $root | nindent 12 }}
          env:
            {{- include "newsmon.env" (dict "root" $root "config" $v.config "where" (printf "%s.config" .where) "derived" .derived) | nindent 12 }}
          startupProbe:
            {{- toYaml $root.Values.probes.startup | nindent 12 }}
          livenessProbe:
            {{- toYaml $root.Values.probes.liveness | nindent 12 }}
          readinessProbe:
            {{- toYaml $root.Values.probes.readiness | nindent 12 }}
          resources:
            {{- include "newsmon.resources" (dict "resources" $v.resources "gpu" .gpu) | nindent 12 }}
          securityContext:
            {{- toYaml $root.Values.securityContext | nindent 12 }}
          volumeMounts:
            {{- include "newsmon.volumeMounts" (dict "root" $root) | nindent 12 }}
      volumes:
        {{- include "newsmon.volumes" (dict "root" $root) | nindent 8 }}
      {{- with $v.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.affinity }}
      affinity:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.topologySpreadConstraints }}
      topologySpreadConstraints:
        {{- toYaml . | nindent 8 }}
      {{- end }}
{{- end }}
