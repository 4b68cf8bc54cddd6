{{/* The release's names and labels. */}}
{{- define "vgpumon.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Contains "vgpumon" unless fullnameOverride says otherwise: VgpumonExporterDown matches
jobs named like it, and the ServiceMonitor's job is the Service's name. */}}
{{- define "vgpumon.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "vgpumon.selectorLabels" -}}
app.kubernetes.io/name: {{ include "vgpumon.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: exporter
{{- end -}}

{{- define "vgpumon.labels" -}}
{{ include "vgpumon.selectorLabels" . }}
app.kubernetes.io/part-of: vgpumon
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "vgpumon.serviceAccountName" -}}
{{- default (include "vgpumon.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{- define "vgpumon.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ default .Chart.AppVersion .Values.image.tag }}
{{- end -}}
{{- end -}}

{{/* The labels kube-prometheus-stack's Prometheus selects by, and the object's own. */}}
{{- define "vgpumon.prometheusLabels" -}}
{{- $labels := merge (dict) (.own | default dict) (.root.Values.prometheusLabels | default dict) -}}
{{- if $labels }}
{{ toYaml $labels }}
{{- end -}}
{{- end -}}

{{/* hostDriver with deviceAccess privileged */}}
{{- define "vgpumon.privileged" -}}
{{- if and (eq .Values.nvml.access "hostDriver") (eq .Values.nvml.hostDriver.deviceAccess "privileged") -}}true{{- end -}}
{{- end -}}

{{/* The kubelet's socket and NFD's features.d belong to root. */}}
{{- define "vgpumon.runsAsRoot" -}}
{{- if or .Values.attribution.kubelet.enabled .Values.nodeFeatures.enabled -}}true{{- end -}}
{{- end -}}

{{- define "vgpumon.tokenMounted" -}}
{{- if or .Values.attribution.kubernetesApi.enabled .Values.nodeProblemDetector.enabled -}}true{{- end -}}
{{- end -}}

{{- define "vgpumon.scheme" -}}
{{- if and .Values.webConfig.secretName .Values.webConfig.tls -}}https{{- else -}}http{{- end -}}
{{- end -}}

{{/* Where the driver root is mounted in the container (hostDriver). */}}
{{- define "vgpumon.driverRootMount" -}}/driver-root{{- end -}}

{{- define "vgpumon.checks" -}}
{{- if and .Values.attribution.kubernetesApi.enabled (not .Values.attribution.kubelet.enabled) -}}
{{- fail "attribution.kubernetesApi names the VMs of pods the kubelet reports: turn on attribution.kubelet too" -}}
{{- end -}}
{{- if and (include "vgpumon.privileged" .) (include "vgpumon.runsAsRoot" .) (not .Values.nvml.hostDriver.allowPrivilegedRoot) -}}
{{- fail "attribution.kubelet and nodeFeatures run the container as uid 0, which holds every capability in a privileged container (nvml.hostDriver.deviceAccess: privileged): use deviceAccess: devicePlugin, or set nvml.hostDriver.allowPrivilegedRoot: true to accept it (docs/kubernetes.md)" -}}
{{- end -}}
{{- if and (eq .Values.nvml.access "hostDriver") (eq .Values.nvml.hostDriver.deviceAccess "devicePlugin") (not .Values.nvml.hostDriver.deviceResources) -}}
{{- fail "nvml.hostDriver.deviceAccess: devicePlugin needs nvml.hostDriver.deviceResources (the device plugin's resources that hand out the NVIDIA device nodes)" -}}
{{- end -}}
{{- if and (eq .Values.nvml.access "hostDriver") (eq (clean .Values.nvml.hostDriver.root) "/") -}}
{{- fail "nvml.hostDriver.root: / would mount the whole host; give the directory that holds libnvidia-ml.so.1 (e.g. /usr/lib/x86_64-linux-gnu) and library: libnvidia-ml.so.1" -}}
{{- end -}}
{{- end -}}
