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
