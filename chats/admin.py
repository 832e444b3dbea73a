from django.contrib import admin

from chats.models import Chat, Message


@admin.register(Chat)
class ChatAdmin(admin.ModelAdmin[Chat]):
    list_display = ["id", "title", "owner", "origin", "created_at", "updated_at"]
    list_filter = ["origin", "owner__tier", "created_at"]
    search_fields = ["title", "owner__username"]
    list_select_related = ["owner"]
    raw_id_fields = ["owner", "summary_through"]
    date_hierarchy = "updated_at"


@admin.register(Message)
class MessageAdmin(admin.ModelAdmin[Message]):
    list_display = ["id", "chat", "role", "short_content", "token_count", "created_at"]
    list_filter = ["role", "created_at"]
    search_fields = ["content"]
    list_select_related = ["chat"]
    raw_id_fields = ["chat"]

    @admin.display(description="content")
    def short_content(self, obj: Message) -> str:
        return obj.content[:80]
