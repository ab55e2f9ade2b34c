{{/* Names */}}
{{- define "dra-fake.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "dra-fake.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (include "dra-fake.name" .) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "dra-fake.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "dra-fake.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "dra-fake.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "dra-fake.selectorLabels" -}}
app.kubernetes.io/name: {{ include "dra-fake.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "dra-fake.pluginServiceAccount" -}}
{{- printf "%s-kubelet-plugin" (include "dra-fake.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "dra-fake.cdControllerServiceAccount" -}}
{{- printf "%s-compute-domain-controller" (include "dra-fake.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Fixed by the controller (computedomain/main.py), as NVIDIA's: the daemon pods' ServiceAccount. */}}
{{- define "dra-fake.cdDaemonServiceAccount" -}}
compute-domain-daemon-service-account
{{- end -}}

{{- define "dra-fake.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* resource.k8s.io version: the value, else the newest the server serves (v1 > v1beta2 > v1beta1). */}}
{{- define "dra-fake.resourceApiVersion" -}}
{{- if .Values.resourceApiVersion -}}
{{- .Values.resourceApiVersion -}}
{{- else if .Capabilities.APIVersions.Has "resource.k8s.io/v1/DeviceClass" -}}
v1
{{- else if .Capabilities.APIVersions.Has "resource.k8s.io/v1beta2/DeviceClass" -}}
v1beta2
{{- else if .Capabilities.APIVersions.Has "resource.k8s.io/v1beta1/DeviceClass" -}}
v1beta1
{{- else if semverCompare ">=1.34.0-0" .Capabilities.KubeVersion.Version -}}
v1
{{- else -}}
v1beta1
{{- end -}}
{{- end -}}

{{/* gpu.nvidia.com -> nvidia.com (the naming of dra_fake/deviceclasses.py) */}}
{{- define "dra-fake.driverDomain" -}}
{{- trimPrefix "gpu." .Values.driverNames.gpu -}}
{{- end -}}

{{/* The inventory document of a pool: `config` if given, else the shorthand fields. */}}
{{- define "dra-fake.inventory" -}}
{{- $inv := . -}}
{{- if $inv.config -}}
{{- toYaml $inv.config -}}
{{- else -}}
{{- $group := dict "profile" $inv.profile "count" (int $inv.count) -}}
{{- if and $inv.mig (ne $inv.mig "none") -}}
{{- $_ := set $group "mig" $inv.mig -}}
{{- end -}}
{{- if $inv.migDevices -}}
{{- $_ := set $group "migDevices" $inv.migDevices -}}
{{- end -}}
{{- $doc := dict "gpus" (list $group) -}}
{{- if $inv.driverVersion -}}
{{- $_ := set $doc "driverVersion" $inv.driverVersion -}}
{{- end -}}
{{- if $inv.cudaDriverVersion -}}
{{- $_ := set $doc "cudaDriverVersion" $inv.cudaDriverVersion -}}
{{- end -}}
{{- toYaml $doc -}}
{{- end -}}
{{- end -}}

{{/*
"not (any of these label maps)" as node-affinity terms. Terms are ORed and the expressions of a
term ANDed, so "not (a=1 and b=2)" is two terms (a NotIn [1]) | (b NotIn [2]), and the terms of
several exclusions multiply out. Input: dict "base" (list of expressions) "excluded" (list of maps).
Output: JSON list of terms (each a list of expressions).
*/}}
{{- define "dra-fake.excludeTerms" -}}
{{- $terms := list .base -}}
{{- range .excluded -}}
{{- $sel := . -}}
{{- $next := list -}}
{{- range $terms -}}
{{- $term := . -}}
{{- range $k, $v := $sel -}}
{{- $next = append $next (append $term (dict "key" $k "operator" "NotIn" "values" (list (toString $v)))) -}}
{{- end -}}
{{- end -}}
{{- $terms = $next -}}
{{- end -}}
{{- toJson $terms -}}
{{- end -}}

{{/*
The plugin DaemonSets: the default one and one per node pool, placed so that every node runs
exactly one: a pool takes the nodes its nodeSelector matches that no earlier pool matched; the
default takes the nodes no pool matches. Output: JSON list of {name, inventory, terms, mode}.
*/}}
{{- define "dra-fake.pools" -}}
{{- $pools := list -}}
{{- $excluded := list -}}
{{- range .Values.nodePools -}}
{{- $base := list -}}
{{- range $k, $v := .nodeSelector -}}
{{- $base = append $base (dict "key" $k "operator" "In" "values" (list (toString $v))) -}}
{{- end -}}
{{- $terms := include "dra-fake.excludeTerms" (dict "base" $base "excluded" $excluded) | fromJsonArray -}}
{{- $own := default (dict) .inventory -}}
{{- $inv := mergeOverwrite (deepCopy $.Values.inventory) (deepCopy $own) -}}
{{- if not $own.config -}}
{{- $_ := set $inv "config" (dict) -}}
{{- end -}}
{{- $pools = append $pools (dict "name" .name "inventory" $inv "terms" $terms "mode" (default $.Values.mode .mode)) -}}
{{- $excluded = append $excluded .nodeSelector -}}
{{- end -}}
{{- $terms := include "dra-fake.excludeTerms" (dict "base" (list) "excluded" $excluded) | fromJsonArray -}}
{{- $pools = prepend $pools (dict "name" "" "inventory" .Values.inventory "terms" $terms "mode" .Values.mode) -}}
{{- toJson $pools -}}
{{- end -}}

{{/* featureGates map -> "A=true,B=false" (sorted) */}}
{{- define "dra-fake.featureGates" -}}
{{- $items := list -}}
{{- range $k, $v := .Values.featureGates -}}
{{- $items = append $items (printf "%s=%t" $k $v) -}}
{{- end -}}
{{- join "," $items -}}
{{- end -}}

{{/* The Node labels and annotation the plugins may change on their own Node (a CEL condition on
`k`; validatingadmissionpolicy.yaml). GFD's keys as dra_fake.gpu.gfd.is_gfd_key. */}}
{{- define "dra-fake.ownNodeLabel" -}}
{{- $terms := list -}}
{{- if .Values.computeDomains.enabled -}}
{{- $terms = append $terms "k == 'resource.nvidia.com/computeDomain'" -}}
{{- end -}}
{{- if .Values.nodeLabels.enabled -}}
{{- $terms = append $terms "k.matches('^nvidia[.]com/(gfd[.]|gpu[.]|cuda[.]|mig[.]|mig-|mps[.]|vgpu[.])')" -}}
{{- end -}}
({{ join " || " $terms }})
{{- end -}}

{{- define "dra-fake.ownNodeAnnotation" -}}
{{- if .Values.nodeLabels.enabled -}}
k == 'dra-fake.dev/gfd-labels'
{{- else -}}
false
{{- end -}}
{{- end -}}

{{- define "dra-fake.ownNodeMessage" -}}
{{- $what := list -}}
{{- if .Values.computeDomains.enabled -}}{{- $what = append $what "the label resource.nvidia.com/computeDomain" -}}{{- end -}}
{{- if .Values.nodeLabels.enabled -}}{{- $what = append $what "GPU Feature Discovery's nvidia.com/ labels and the annotation dra-fake.dev/gfd-labels" -}}{{- end -}}
only {{ join " and " $what }} may change
{{- end -}}

{{/* The ConfigMap of the device plugin's named configs ("" when none), as NVIDIA's chart: `config.name`
(an existing one) or the chart's own from `config.map`; both, or several configs without a way to a
default, fail with NVIDIA's messages. */}}
{{- define "dra-fake.devicePluginConfigMap" -}}
{{- $c := .Values.devicePlugin.config -}}
{{- if and $c.name $c.map -}}
{{- fail "devicePlugin.config: Only one of 'config.name' or 'config.map' should ever be set for a given deployment." -}}
{{- end -}}
{{- if $c.map -}}
{{- $fallbacks := $c.fallbackStrategies -}}
{{- if not (or $c.default (and (has "named" $fallbacks) (hasKey $c.map "default")) (and (has "single" $fallbacks) (eq (len $c.map) 1)) (has "empty" $fallbacks)) -}}
{{- fail "devicePlugin.config: A default config must be provided when more than one configuration is set in 'config.map'. Either set the default using 'config.default' or provide a list of fallback strategies to try in 'config.fallbackStrategies'." -}}
{{- end -}}
{{- if and $c.default (not (hasKey $c.map $c.default)) -}}
{{- fail (printf "devicePlugin.config.default: %q is not a key of config.map" $c.default) -}}
{{- end -}}
{{- printf "%s-device-plugin-configs" (include "dra-fake.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $c.name -}}
{{- end -}}
{{- end -}}
