{#
  The node of the model an operation names (`streamsql_explain`, `streamsql_flush`):
    --args '{model: orders}'          the model orders (one version, or not versioned)
    --args '{model: orders, v: 2}'    version 2 of the versioned model orders
    --args '{model: orders_v2}'       the same, by the versioned name
  A name that matches more than one model (versions, or packages) is an error naming them.
#}
{% macro streamsql_named_model(operation, model, v=none) %}
  {%- set matches = [] -%}
  {%- for node in graph.nodes.values() -%}
    {%- if node.resource_type == 'model' -%}
      {%- set version = node.version -%}
      {%- set by_name = node.name == model and (v is none or (version is not none and version | string == v | string)) -%}
      {%- set by_versioned_name = version is not none and v is none and (node.name ~ '_v' ~ version) == model -%}
      {%- if by_name or by_versioned_name -%}
        {%- do matches.append(node) -%}
      {%- endif -%}
    {%- endif -%}
  {%- endfor -%}
  {%- set wanted = model ~ (' v' ~ v if v is not none else '') -%}
  {%- if matches | length == 0 -%}
    {%- do exceptions.raise_compiler_error(operation ~ ": no model named '" ~ wanted ~ "' in this project. Pass --args '{model: <model name>}' (for a versioned model also v: <version>).") -%}
  {%- endif -%}
  {%- if matches | length > 1 -%}
    {%- set names = [] -%}
    {%- for node in matches -%}
      {%- do names.append(node.package_name ~ '.' ~ node.name ~ (' v' ~ node.version if node.version is not none else '')) -%}
    {%- endfor -%}
    {%- do exceptions.raise_compiler_error(operation ~ ": " ~ matches | length ~ " models are named '" ~ wanted ~ "': " ~ names | join(', ') ~ ". Name one: for a version, --args '{model: " ~ model ~ ", v: <version>}'.") -%}
  {%- endif -%}
  {{ return(matches[0]) }}
{% endmacro %}
