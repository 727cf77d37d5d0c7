{{/* The chart's name, or nameOverride. */}}
{{- define "provider-health-exporter.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The full name of the release's objects: fullnameOverride, else the release name when it already
holds the chart's name, else "<release>-<name>". Truncated to 63 characters (DNS names).
*/}}
{{- define "provider-health-exporter.fullname" -}}
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

{{- define "provider-health-exporter.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The labels every object carries. */}}
{{- define "provider-health-exporter.labels" -}}
helm.sh/chart: {{ include "provider-health-exporter.chart" . }}
{{ include "provider-health-exporter.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: {{ include "provider-health-exporter.name" . }}
{{- end }}

{{/* The labels that select the release's pods. */}}
{{- define "provider-health-exporter.selectorLabels" -}}
app.kubernetes.io/name: {{ include "provider-health-exporter.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "provider-health-exporter.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "provider-health-exporter.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The image: [registry/]repository, then @digest when set (a digest names the content, so it wins
over the tag), else :tag (default "v" followed by the chart's appVersion).
*/}}
{{- define "provider-health-exporter.image" -}}
{{- $repo := .Values.image.repository }}
{{- with .Values.image.registry }}
{{- $repo = printf "%s/%s" (trimSuffix "/" .) $repo }}
{{- end }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" $repo .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" $repo (default (printf "v%s" .Chart.AppVersion) .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* Whether the exporter serves with a web config (--web.config.file): "true" or "". */}}
{{- define "provider-health-exporter.webConfigOn" -}}
{{- if or .Values.webConfig.config .Values.webConfig.existingSecret }}true{{ end }}
{{- end }}

{{/* The Secret of the web config: webConfig.existingSecret, else <fullname>-web-config. */}}
{{- define "provider-health-exporter.webConfigSecret" -}}
{{- default (printf "%s-web-config" (include "provider-health-exporter.fullname" .)) .Values.webConfig.existingSecret }}
{{- end }}

{{/*
The scheme the exporter serves: webConfig.scheme when set, else HTTPS when the inline web config
has tls_server_config, else HTTP.
*/}}
{{- define "provider-health-exporter.scheme" -}}
{{- if .Values.webConfig.scheme }}
{{- .Values.webConfig.scheme }}
{{- else if and .Values.webConfig.config (index .Values.webConfig.config "tls_server_config") }}
{{- "HTTPS" }}
{{- else }}
{{- "HTTP" }}
{{- end }}
{{- end }}

{{/*
A probe of the values (readinessProbe, livenessProbe) following the web config: an httpGet
probe gets the scheme the exporter serves and, with webConfig.probeBasicAuth, an Authorization
header. With basic auth on (basic_auth_users in the inline web config, or
webConfig.basicAuthUsers for an existingSecret) and no probeBasicAuth, the kubelet could not
authenticate: the probe becomes a tcpSocket probe of the same port. Call with (list $ probe).
*/}}
{{- define "provider-health-exporter.probe" -}}
{{- $root := index . 0 }}
{{- $p := deepCopy (index . 1) }}
{{- $w := $root.Values.webConfig }}
{{- if and $p.httpGet $p.httpGet.path }}
{{- $_ := set $p.httpGet "path" (printf "%s%s" (include "provider-health-exporter.routePrefix" $root) $p.httpGet.path) }}
{{- end }}
{{- if $p.httpGet }}
{{- $auth := or $w.basicAuthUsers (and $w.config (index $w.config "basic_auth_users")) }}
{{- if and $auth (not $w.probeBasicAuth.username) }}
{{- $_ := set $p "tcpSocket" (dict "port" $p.httpGet.port) }}
{{- $_ := unset $p "httpGet" }}
{{- else }}
{{- $scheme := include "provider-health-exporter.scheme" $root }}
{{- if ne $scheme "HTTP" }}
{{- $_ := set $p.httpGet "scheme" $scheme }}
{{- end }}
{{- if $w.probeBasicAuth.username }}
{{- $h := printf "%s:%s" $w.probeBasicAuth.username $w.probeBasicAuth.password | b64enc }}
{{- $_ := set $p.httpGet "httpHeaders" (append (default list $p.httpGet.httpHeaders) (dict "name" "Authorization" "value" (printf "Basic %s" $h))) }}
{{- end }}
{{- end }}
{{- end }}
{{- toYaml $p }}
{{- end }}

{{/* The Lease of --crd.leader-elect: named after the instance (--crd.lease-name is not set). */}}
{{- define "provider-health-exporter.leaseName" -}}
{{- default "provider-health-exporter" .Values.crd.instance }}
{{- end }}

{{/* The ConfigMap of an inline providers file. */}}
{{- define "provider-health-exporter.configMapName" -}}
{{- printf "%s-providers" (include "provider-health-exporter.fullname" .) }}
{{- end }}

{{/*
The provider types' credentials Secrets, from files/types.yaml (written by make generate from
each type's checks/<type>/credentials.yaml), as a YAML list: each with its secret (the Secret's
name suffix, the volume's name and the key of credentials in the values), mountPath, and keys
(file, value) or files (value). A type marked none has no Secret.
*/}}
{{- define "provider-health-exporter.credentialsTypes" -}}
{{- $withSecrets := list }}
{{- range (.Files.Get "files/types.yaml" | fromYaml).credentials }}
{{- if not .none }}
{{- $withSecrets = append $withSecrets . }}
{{- end }}
{{- end }}
{{- toYaml $withSecrets }}
{{- end }}

{{/*
The Secret of one type's credentials (its secret: ssh, gcp, ...): its existingSecret, else
<fullname>-<secret>. Call with (list $ "ssh").
*/}}
{{- define "provider-health-exporter.credentialsSecret" -}}
{{- $root := index . 0 }}
{{- $kind := index . 1 }}
{{- $c := index $root.Values.credentials $kind | default dict }}
{{- default (printf "%s-%s" (include "provider-health-exporter.fullname" $root) $kind) $c.existingSecret }}
{{- end }}

{{/*
The contents the chart puts in the Secret of one type's credentials, as a dict of file name to
content (empty when the values give none): each of its keys' file from its value, or the map
of its files' value. Call with (list $ <an entry of credentialsTypes>). Fails when both
contents and existingSecret are set.
*/}}
{{- define "provider-health-exporter.credentialsData" -}}
{{- $root := index . 0 }}
{{- $t := index . 1 }}
{{- $c := index $root.Values.credentials $t.secret | default dict }}
{{- $data := dict }}
{{- if $t.files }}
{{- $data = index $c $t.files.value | default dict | deepCopy }}
{{- end }}
{{- range $k := $t.keys }}
{{- $_ := set $data $k.file (index $c $k.value) }}
{{- end }}
{{- $set := dict }}
{{- range $k, $v := $data }}
{{- if $v }}
{{- $_ := set $set $k $v }}
{{- end }}
{{- end }}
{{- if and $set $c.existingSecret }}
{{- fail (printf "credentials.%s: set either existingSecret or the contents of the Secret the chart creates, not both" $t.secret) }}
{{- end }}
{{- toYaml $set }}
{{- end }}

{{/* The labels of the Service: the chart's and service.labels. */}}
{{- define "provider-health-exporter.serviceLabels" -}}
{{ include "provider-health-exporter.labels" . }}
{{- with .Values.service.labels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
The job label Prometheus gives the exporter's series, which every rule, inhibit rule and dashboard
query the chart renders selects. The Prometheus Operator takes a ServiceMonitor's job from the
Service: the value of the Service's label serviceMonitor.jobLabel when set and present, else the
Service's name. This helper reads both from the same helpers that render the Service, so the
rules follow nameOverride, fullnameOverride, the release's name and jobLabel alike.
*/}}
{{- define "provider-health-exporter.job" -}}
{{- $job := include "provider-health-exporter.fullname" . }}
{{- with .Values.serviceMonitor.jobLabel }}
{{- $labels := include "provider-health-exporter.serviceLabels" $ | fromYaml }}
{{- with index $labels . }}
{{- $job = . }}
{{- end }}
{{- end }}
{{- $job }}
{{- end }}

{{/*
A file of files/ generated from the mixin with the placeholders of charts/chart_config.libsonnet
replaced by the release's: the job, and the dashboard's uid (the full name, cut to Grafana's 40
characters) and title. Call with (list $ "files/prometheusrule-spec.yaml").
*/}}
{{- define "provider-health-exporter.mixinFile" -}}
{{- $root := index . 0 }}
{{- $fullname := include "provider-health-exporter.fullname" $root }}
{{- $title := "Provider health" }}
{{- if ne $fullname $root.Chart.Name }}
{{- $title = printf "Provider health (%s)" $fullname }}
{{- end }}
{{- $root.Files.Get (index . 1)
  | replace "__PHE_JOB__" (include "provider-health-exporter.job" $root)
  | replace "__PHE_DASHBOARD_UID__" ($fullname | trunc 40 | trimSuffix "-")
  | replace "__PHE_DASHBOARD_TITLE__" $title }}
{{- end }}

{{/*
The path prefix of the exporter's endpoints, as the exporter derives it: web.routePrefix, else
the path of web.externalURL; "" for the root, else a path without a trailing slash.
*/}}
{{- define "provider-health-exporter.routePrefix" -}}
{{- $p := "" }}
{{- if .Values.web.routePrefix }}
{{- $p = .Values.web.routePrefix }}
{{- else if .Values.web.externalURL }}
{{- $p = (urlParse .Values.web.externalURL).path }}
{{- end }}
{{- trimSuffix "/" $p }}
{{- end }}

{{/*
"true" when the pod mounts its ServiceAccount token: serviceAccount.automountToken when set,
else when a feature uses the token: the writer (crd.enabled), the shard (shard.enabled), a
kubernetes provider with in-cluster config (no kubeconfig) or naming the token's path, a
providers file the chart cannot read (existingConfigMap, existingSecret), or extraArgs turning
the writer or the shard on. Otherwise the token is not mounted: a pod that reads no cluster
holds no credential to it.
*/}}
{{- define "provider-health-exporter.automountToken" -}}
{{- $set := .Values.serviceAccount.automountToken -}}
{{- if kindIs "bool" $set -}}
{{- if $set }}true{{ end -}}
{{- else -}}
{{- $need := or .Values.crd.enabled .Values.shard.enabled .Values.config.existingConfigMap .Values.config.existingSecret -}}
{{- range .Values.config.providers -}}
{{- if and (eq (toString .type) "kubernetes") (not (dig "kubernetes" "kubeconfig" "" .)) -}}{{ $need = true }}{{- end -}}
{{- if contains "/var/run/secrets/kubernetes.io/serviceaccount" (toYaml .) -}}{{ $need = true }}{{- end -}}
{{- end -}}
{{- range .Values.extraArgs -}}
{{- if or (hasPrefix "--crd.enabled" .) (hasPrefix "--shard.enabled" .) -}}{{ $need = true }}{{- end -}}
{{- end -}}
{{- if $need }}true{{ end -}}
{{- end -}}
{{- end }}
