"""Qt item models shared by the views: the table-model boilerplate and the pair picker's catalogue models."""
