"""What jobctl's output promises, below every layer (each may import it; it imports nothing
of jobctl's): the row shapes that cross modules, their keys the JSON contract (``shapes``);
JSON as jobctl writes it, in its output, its plan files and its statements' JSON parameters
(``json_text``); and text from rows as a terminal shows it, what is printed being what is
stored (``safe_text``)."""
