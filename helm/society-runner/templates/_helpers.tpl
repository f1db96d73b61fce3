{{/* A label map as k=v,k=v (the SOCIETY_*_NODE_SELECTOR format). */}}
{{- define "society-runner.labels" -}}
{{- $pairs := list -}}
{{- range $key, $value := . -}}
{{- $pairs = append $pairs (printf "%s=%s" $key $value) -}}
{{- end -}}
{{- join "," $pairs -}}
{{- end -}}
