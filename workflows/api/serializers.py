"""Serializers of the definitions API (output shapes; input is the raw component document)."""

from __future__ import annotations

from rest_framework import serializers

from workflows.models import Component


class ComponentVersionOutputSerializer(serializers.ModelSerializer):
    """One published version in a listing."""

    class Meta:
        model = Component
        fields = ["version", "flowVersion", "tags", "contentHash", "publishedBy", "createdAt"]

    flowVersion = serializers.CharField(source="flow_version")
    contentHash = serializers.CharField(source="content_hash")
    publishedBy = serializers.CharField(source="published_by")
    createdAt = serializers.DateTimeField(source="created_at")


class PublishResultOutputSerializer(serializers.Serializer):
    """The answer to a publish: which component, and whether it was new."""

    kind = serializers.CharField()
    domain = serializers.CharField()
    key = serializers.CharField()
    version = serializers.CharField()
    status = serializers.ChoiceField(choices=["published", "unchanged"])
    contentHash = serializers.CharField()


class ComponentDocumentSerializer(serializers.Serializer):
    """A component document (workflow, task, schema, view, function, extension, mapping), as
    published and as read back. `attributes` is the kind's own body (vnext-schema)."""

    key = serializers.CharField(max_length=200)
    domain = serializers.CharField(max_length=100)
    version = serializers.CharField(max_length=64)
    flow = serializers.CharField(max_length=100)
    flowVersion = serializers.CharField(required=False, max_length=64)
    tags = serializers.ListField(child=serializers.CharField())
    attributes = serializers.DictField()


class PublishBatchOutputSerializer(serializers.Serializer):
    """The answer to publishing a JSON array of documents (all or nothing)."""

    items = PublishResultOutputSerializer(many=True)


class ComponentVersionsOutputSerializer(serializers.Serializer):
    """One component with its published versions, newest first."""

    key = serializers.CharField()
    latest = serializers.CharField()
    versions = ComponentVersionOutputSerializer(many=True)


class ComponentListOutputSerializer(serializers.Serializer):
    """The components of a kind in a domain the caller may read."""

    kind = serializers.CharField()
    domain = serializers.CharField()
    items = ComponentVersionsOutputSerializer(many=True)
