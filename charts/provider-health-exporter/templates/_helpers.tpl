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

{{- define "provider-health-exporter.image" -}}
{{- printf "%s:%s" .Values.image.repository (default (printf "v%s" .Chart.AppVersion) .Values.image.tag) }}
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
The Secret of one kind of credentials (ssh, gcp, vsphere, kubeconfigs): its existingSecret, else
<fullname>-<kind>. Call with (list $ "ssh").
*/}}
{{- define "provider-health-exporter.credentialsSecret" -}}
{{- $root := index . 0 }}
{{- $kind := index . 1 }}
{{- $c := index $root.Values.credentials $kind }}
{{- default (printf "%s-%s" (include "provider-health-exporter.fullname" $root) $kind) $c.existingSecret }}
{{- end }}

{{/*
The contents the chart puts in the Secret of one kind of credentials, as a dict of file name to
content (empty when the values give none). Call with (list $ "ssh"). Fails when both contents
and existingSecret are set.
*/}}
{{- define "provider-health-exporter.credentialsData" -}}
{{- $root := index . 0 }}
{{- $kind := index . 1 }}
{{- $c := index $root.Values.credentials $kind }}
{{- $data := dict }}
{{- if eq $kind "ssh" }}
{{- $_ := set $data "id_ed25519" $c.privateKey }}
{{- $_ := set $data "known_hosts" $c.knownHosts }}
{{- $_ := set $data "passphrase" $c.passphrase }}
{{- else if eq $kind "gcp" }}
{{- $_ := set $data "key.json" $c.key }}
{{- else if eq $kind "vsphere" }}
{{- $_ := set $data "username" $c.username }}
{{- $_ := set $data "password" $c.password }}
{{- $_ := set $data "ca.pem" $c.ca }}
{{- else if eq $kind "kubeconfigs" }}
{{- $data = deepCopy $c.files }}
{{- end }}
{{- $set := dict }}
{{- range $k, $v := $data }}
{{- if $v }}
{{- $_ := set $set $k $v }}
{{- end }}
{{- end }}
{{- if and $set $c.existingSecret }}
{{- fail (printf "credentials.%s: set either existingSecret or the contents of the Secret the chart creates, not both" $kind) }}
{{- end }}
{{- toYaml $set }}
{{- end }}
