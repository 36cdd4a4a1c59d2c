"""A deterministic Alpaca-format instruction set for the offline preset (``samples/alpaca_sample.json``,
written by ``tools/make_alpaca_sample.py``).

Every row is generated here from small tables (no rows are copied from Stanford Alpaca). About half
are voice-assistant requests of the kind the speech sample speaks (timers, alarms, weather, lights,
music, lists, arithmetic, unit conversion, calendar, calls, general questions), many of them in the form the
voice pipeline gives the model a transcript (``duet.text.request_text``: lower case, no punctuation, numbers in
digits); the rest are general tasks (rewrite, classify, sort, count, facts).
Answers are computed (sorting, counting) so they are always correct; what a small model cannot work out
itself (sums, unit and temperature conversions, the time and date) it answers with a tool call
(``slm.tool_calls``: ``50 minus 3 is <<calc: 50 - 3>>.``), which generation executes. The assistant never invents
live data or facts it was not taught (weather, calendar contents, prices, populations, ages): it says it has no
access, or "I don't know that." (:data:`UNKNOWN_ANSWER`); an action it cannot take it declines by name through the
``request`` tool, which repeats the request (:data:`DECLINE`: "Sorry, I can't <<request>>." -> "Sorry, I can't book a
flight to Oslo."; the actions: :data:`UNSUPPORTED_ACTIONS`). :func:`tool_examples` draws only the rows with a call
or a refusal, for mixing into another instruction set (``data.tool_rows`` of the fine-tune's config).
"""

from __future__ import annotations

import random

from duet.synth.corpus import held_out_texts
from duet.synth.corpus_text import assistant_requests, number_to_words
from duet.text import normalize_text, request_text
from slm.tool_calls import DECLINE, UNKNOWN_ANSWER
from slm.tool_calls import format_number as fmt_number


def asr_form(text: str) -> str:
    """Lower-case, drop punctuation and spell digits out, as the speech recogniser's transcripts look."""
    words = []
    for token in text.replace("-", " -").split():
        if ":" in token and token.split(":")[0].isdigit():
            hour, minute = token.split(":")[0], token.split(":")[1][:2]
            spoken_minute = "" if minute == "00" else (" oh " if minute[0] == "0" else " ") + number_to_words(int(minute))
            words.append(number_to_words(int(hour)) + spoken_minute)
            continue
        stripped = "".join(ch for ch in token if ch.isalnum() or ch == "'").lower()
        if stripped.isdigit():
            stripped = ("minus " if token.startswith("-") else "") + number_to_words(int(stripped))
        if stripped:
            words.append(stripped)
    return " ".join(words)


CITIES = ["London", "Paris", "Berlin", "Tokyo", "New York", "Chicago", "Sydney", "Madrid", "Rome", "Toronto",
          "Boston", "Seattle", "Dublin", "Oslo", "Cairo", "Mumbai", "Lisbon", "Vienna", "Prague", "Denver"]
ROOMS = ["kitchen", "living room", "bedroom", "bathroom", "office", "hallway", "garage", "dining room"]
GENRES = ["jazz", "classical music", "rock", "pop", "blues", "country music", "hip hop", "reggae", "folk music", "lo-fi beats"]
ARTISTS = ["the Beatles", "Miles Davis", "Mozart", "Taylor Swift", "Bob Marley", "Adele", "Queen", "Beethoven"]
ITEMS = ["milk", "eggs", "bread", "coffee", "apples", "rice", "butter", "cheese", "bananas", "tomatoes",
         "pasta", "onions", "yogurt", "orange juice", "chicken", "carrots", "olive oil", "tea", "sugar", "flour"]
LISTS = ["shopping list", "grocery list", "to-do list"]
TASKS = ["call the dentist", "pay the electricity bill", "water the plants", "pick up the kids",
         "book a table for dinner", "send the report", "buy a birthday present", "take out the trash",
         "renew my passport", "walk the dog"]
PEOPLE = ["Anna", "David", "Maria", "John", "Sarah", "Peter", "Emma", "Lucas", "Olivia", "James"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday", "tomorrow"]
EVENTS = ["meeting", "lunch", "doctor's appointment", "call", "dentist appointment", "team meeting"]

# (singular, plural, factor to the target unit, target singular, target plural); offsets handled separately.
CONVERSIONS = [
    ("kilometer", "kilometers", 0.621371, "mile", "miles"),
    ("mile", "miles", 1.609344, "kilometer", "kilometers"),
    ("kilogram", "kilograms", 2.204623, "pound", "pounds"),
    ("pound", "pounds", 0.453592, "kilogram", "kilograms"),
    ("meter", "meters", 3.28084, "foot", "feet"),
    ("foot", "feet", 0.3048, "meter", "meters"),
    ("inch", "inches", 2.54, "centimeter", "centimeters"),
    ("liter", "liters", 0.264172, "gallon", "gallons"),
    ("gallon", "gallons", 3.785412, "liter", "liters"),
    ("hour", "hours", 60.0, "minute", "minutes"),
    ("minute", "minutes", 60.0, "second", "seconds"),
    ("day", "days", 24.0, "hour", "hours"),
]

FACTS = [
    ("What is the capital of France?", "The capital of France is Paris."),
    ("What is the capital of Japan?", "The capital of Japan is Tokyo."),
    ("What is the capital of Italy?", "The capital of Italy is Rome."),
    ("What is the capital of Spain?", "The capital of Spain is Madrid."),
    ("What is the capital of Germany?", "The capital of Germany is Berlin."),
    ("What is the capital of Canada?", "The capital of Canada is Ottawa."),
    ("What is the capital of Australia?", "The capital of Australia is Canberra."),
    ("What is the capital of Egypt?", "The capital of Egypt is Cairo."),
    ("What is the capital of Norway?", "The capital of Norway is Oslo."),
    ("What is the capital of Portugal?", "The capital of Portugal is Lisbon."),
    ("How many days are in a week?", "There are seven days in a week."),
    ("How many months are in a year?", "There are twelve months in a year."),
    ("How many days are in a leap year?", "A leap year has 366 days."),
    ("How many minutes are in an hour?", "There are 60 minutes in an hour."),
    ("How many legs does a spider have?", "A spider has eight legs."),
    ("How many continents are there?", "There are seven continents."),
    ("What is the largest planet in the solar system?", "Jupiter is the largest planet in the solar system."),
    ("What is the closest planet to the sun?", "Mercury is the closest planet to the sun."),
    ("Which planet is known as the red planet?", "Mars is known as the red planet."),
    ("At what temperature does water boil?", "Water boils at 100 degrees Celsius at sea level."),
    ("At what temperature does water freeze?", "Water freezes at 0 degrees Celsius."),
    ("What gas do plants take in from the air?", "Plants take in carbon dioxide from the air."),
    ("What is the chemical symbol for gold?", "The chemical symbol for gold is Au."),
    ("What is the chemical formula of water?", "The chemical formula of water is H2O."),
    ("Who wrote Romeo and Juliet?", "William Shakespeare wrote Romeo and Juliet."),
    ("What is the largest ocean on Earth?", "The Pacific Ocean is the largest ocean on Earth."),
    ("What is the longest river in Africa?", "The Nile is the longest river in Africa."),
    ("How many sides does a triangle have?", "A triangle has three sides."),
    ("How many sides does a hexagon have?", "A hexagon has six sides."),
    ("What color do you get by mixing blue and yellow?", "Mixing blue and yellow gives green."),
    ("What is the fastest land animal?", "The cheetah is the fastest land animal."),
    ("What is the tallest mountain in the world?", "Mount Everest is the tallest mountain in the world."),
    ("What language is spoken in Brazil?", "The main language spoken in Brazil is Portuguese."),
    ("How many hours are in a day?", "There are 24 hours in a day."),
    ("What do bees make?", "Bees make honey."),
]
FACT_PREFIXES = ["", "Tell me: ", "Quick question. ", "Do you know ", "Can you tell me "]

# (sentence, sentiment) pairs written for the classification tasks.
SENTIMENTS = [
    ("I love this new phone, it works perfectly.", "Positive"), ("The food was cold and tasteless.", "Negative"),
    ("What a wonderful day at the beach!", "Positive"), ("The train was late again and I missed my meeting.", "Negative"),
    ("This book is a delight to read.", "Positive"), ("The hotel room was dirty and noisy.", "Negative"),
    ("The concert was amazing from start to finish.", "Positive"), ("My order arrived broken.", "Negative"),
    ("The staff were friendly and helpful.", "Positive"), ("I waited two hours and nobody answered.", "Negative"),
    ("The new park is beautiful and clean.", "Positive"), ("The movie was boring and far too long.", "Negative"),
    ("Thanks for the quick delivery, great service.", "Positive"), ("The app keeps crashing on my laptop.", "Negative"),
    ("The meeting starts at ten in room four.", "Neutral"), ("The store opens at nine on weekdays.", "Neutral"),
    ("The package weighs two kilograms.", "Neutral"), ("The bus leaves from the main station.", "Neutral"),
]
ANIMALS = {"dog": "mammal", "eagle": "bird", "salmon": "fish", "frog": "amphibian", "snake": "reptile",
           "whale": "mammal", "parrot": "bird", "shark": "fish", "lizard": "reptile", "cat": "mammal",
           "owl": "bird", "tuna": "fish", "turtle": "reptile", "horse": "mammal", "penguin": "bird"}
FOODS = {"apple": "fruit", "carrot": "vegetable", "banana": "fruit", "potato": "vegetable", "cherry": "fruit",
         "broccoli": "vegetable", "mango": "fruit", "spinach": "vegetable", "pear": "fruit", "onion": "vegetable"}
# Present-tense sentences with their past-tense rewrite.
TENSES = [
    ("She walks to school every day.", "She walked to school every day."),
    ("We play football in the park.", "We played football in the park."),
    ("He cooks dinner for his family.", "He cooked dinner for his family."),
    ("They watch a movie on Friday.", "They watched a movie on Friday."),
    ("I clean the kitchen after lunch.", "I cleaned the kitchen after lunch."),
    ("The children laugh at the clown.", "The children laughed at the clown."),
    ("My brother works in a bank.", "My brother worked in a bank."),
    ("The dog jumps over the fence.", "The dog jumped over the fence."),
    ("You open the window in the morning.", "You opened the window in the morning."),
    ("The team wins the final match.", "The team won the final match."),
    ("She writes a letter to her friend.", "She wrote a letter to her friend."),
    ("He drives to work.", "He drove to work."),
]
# Informal sentences with a polite rewrite.
POLITE = [
    ("Give me the report now.", "Could you please send me the report when you have a moment?"),
    ("Close the door.", "Would you mind closing the door, please?"),
    ("Call me back.", "Could you please call me back when you are free?"),
    ("Send the file.", "Could you please send me the file?"),
    ("Turn the music down.", "Would you please turn the music down a little?"),
    ("Move your car.", "Could you please move your car?"),
    ("Answer my email.", "Could you please reply to my email when you get a chance?"),
    ("Fix the printer.", "Could you please take a look at the printer?"),
]

POLITE_PREFIX = ["", "please ", "hey assistant ", "could you ", "can you "]
POLITE_SUFFIX = ["", " please", " for me", " thanks"]


TIMER_LABELS = ["pasta", "tea", "laundry", "oven", "workout", "pizza", "bread", "egg", "rice", "soup", "cake", "nap",
                "study", "bath", "muffin", "steak"]


def _timer(rng: random.Random) -> tuple[str, str]:
    if rng.random() < 0.3:
        return _timer_control(rng)
    n = rng.choice([1, 2, 3, 4, 5, 6, 8, 10, 12, 15, 20, 25, 30, 40, 45, 50, 60, 90])
    unit = rng.choice(["minute", "minute", "second", "hour"]) if n <= 12 else rng.choice(["minute", "second"])
    units = unit if n == 1 else unit + "s"
    # half the timers carry a name, which the answer repeats: the name is whatever word the request gave
    label = rng.choice(TIMER_LABELS) if rng.random() < 0.5 else ""
    templates = [f"Set a timer for {n} {units}.", f"Start a {n} {unit} timer.",
                 f"Can you set a timer for {n} {units}?", f"Timer for {n} {units}, please.",
                 f"Count down {n} {units}."]
    if label:
        templates = [f"Set a {label} timer for {n} {units}.", f"Start a {label} timer for {n} {units}.",
                     f"Set a {n} {unit} {label} timer."]
    instruction = rng.choice(templates)
    named = f" {label}" if label else ""
    return instruction, f"OK, your{named} timer is set for {n} {units}. I'll let you know when it's done."


def _timer_control(rng: random.Random) -> tuple[str, str]:
    """Pausing, resuming or cancelling a running timer, named or not: the answer names the timer as the request did."""
    label = rng.choice(TIMER_LABELS) if rng.random() < 0.5 else ""
    named = f"{label} timer" if label else "timer"
    verb, done = rng.choice([("pause", "paused"), ("hold", "paused"), ("resume", "resumed"), ("restart", "resumed"),
                             ("stop", "cancelled"), ("cancel", "cancelled")])
    instruction = rng.choice([f"{verb.capitalize()} the {named}.", f"{verb.capitalize()} my {named}.",
                              f"Please {verb} the {named}.", f"Can you {verb} the {named}?"])
    if done == "cancelled":
        return instruction, f"I've cancelled the {named}."
    return instruction, f"{named.capitalize()} {done}."


def _alarm(rng: random.Random) -> tuple[str, str]:
    hour = rng.randint(1, 12)
    minute = rng.choice([0, 0, 15, 30, 45, 10, 20])
    ampm = rng.choice(["a.m.", "a.m.", "p.m."])
    spoken = f"{hour}" if minute == 0 else f"{hour}:{minute:02d}"
    day = rng.choice(["", "", " tomorrow", " on Monday", " on Saturday"])
    if rng.random() < 0.3:  # an alarm already set, named by its time
        instruction = rng.choice([f"Turn off my {spoken} {ampm} alarm.", f"Cancel my {spoken} {ampm} alarm.",
                                  f"Switch off the {spoken} {ampm} alarm.", f"Delete my {spoken} {ampm} alarm."])
        return instruction, f"I've turned off your {hour}:{minute:02d} {ampm} alarm."
    instruction = rng.choice([f"Set an alarm for {spoken} {ampm}{day}.", f"Wake me up at {spoken} {ampm}{day}.",
                              f"Please set an alarm at {spoken} {ampm}{day}.", f"I need an alarm for {spoken} {ampm}{day}."])
    return instruction, f"Done. Your alarm is set for {hour}:{minute:02d} {ampm}{day}."


def _weather(rng: random.Random) -> tuple[str, str]:
    if rng.random() < 0.35:
        return _weather_here(rng)
    city = rng.choice(CITIES)
    when = rng.choice(["today", "tomorrow", "this weekend", "right now", "tonight"])
    instruction = rng.choice([f"What's the weather like in {city} {when}?", f"Will it rain in {city} {when}?",
                              f"How hot will it be in {city} {when}?", f"Do I need an umbrella in {city} {when}?",
                              f"What is the forecast for {city} {when}?", f"Is it cold in {city} {when}?"])
    return instruction, _NO_WEATHER.format(where=f" in {city} {when}")


def _weather_here(rng: random.Random) -> tuple[str, str]:
    """Weather asked without a place (where the user is): the answer names the time asked about, and no city."""
    when = rng.choice(["today", "tomorrow", "tonight", "this weekend", "this afternoon", "outside", "right now",
                       *(f"on {day}" for day in DAYS[:7])])
    questions = [f"What's the weather like {when}?", f"Will it rain {when}?", f"How cold is it {when}?",
                 f"Is it warm {when}?", f"How windy is it {when}?"]
    if when not in ("outside", "right now"):
        forecast = when.removeprefix("on ")
        questions += [f"What is the forecast for {forecast}?", f"Show me the weather forecast for {forecast}."]
    instruction = rng.choice(questions)
    return instruction, _NO_WEATHER.format(where=f" {when}")


def _lights(rng: random.Random) -> tuple[str, str]:
    room = rng.choice(ROOMS)
    kind = rng.randrange(3)
    if kind == 0:
        state = rng.choice(["on", "off"])
        instruction = rng.choice([f"Turn {state} the lights in the {room}.", f"Switch {state} the {room} lights.",
                                  f"Turn the {room} lights {state}."])
        return instruction, f"Turning the {room} lights {state}."
    if kind == 1:
        level = rng.choice([10, 20, 25, 30, 40, 50, 60, 70, 75, 80, 90])
        instruction = rng.choice([f"Dim the {room} lights to {level} percent.", f"Set the lights in the {room} to {level} percent."])
        return instruction, f"Setting the {room} lights to {level} percent."
    color = rng.choice(["blue", "red", "green", "warm white", "purple", "orange"])
    instruction = rng.choice([f"Make the {room} lights {color}.", f"Change the {room} lights to {color}."])
    return instruction, f"Changing the {room} lights to {color}."


def _music(rng: random.Random) -> tuple[str, str]:
    kind = rng.randrange(4)
    if kind == 0:
        genre = rng.choice(GENRES)
        instruction = rng.choice([f"Play some {genre}.", f"Put on some {genre}.", f"I want to listen to {genre}."])
        return instruction, f"Playing {genre}."
    if kind == 1:
        artist = rng.choice(ARTISTS)
        instruction = rng.choice([f"Play music by {artist}.", f"Play a song by {artist}.", f"Put on {artist}."])
        return instruction, f"Playing music by {artist}."
    if kind == 2:
        action, reply = rng.choice([("Pause the music.", "Music paused."), ("Stop the music.", "Music stopped."),
                                    ("Skip this song.", "Skipping to the next song."), ("Next song.", "Skipping to the next song."),
                                    ("Resume the music.", "Resuming playback."), ("Play the previous song.", "Going back to the previous song.")])
        return action, reply
    level = rng.choice([2, 3, 4, 5, 6, 7, 8])
    instruction = rng.choice([f"Set the volume to {level}.", f"Turn the volume to {level}.", f"Change the volume to {level}."])
    return instruction, f"Volume set to {level}."


def _lists(rng: random.Random) -> tuple[str, str]:
    kind = rng.randrange(3)
    if kind == 0:
        item, name = rng.choice(ITEMS), rng.choice(LISTS[:2])
        instruction = rng.choice([f"Add {item} to my {name}.", f"Put {item} on the {name}.", f"Please add {item} to the {name}."])
        return instruction, f"I've added {item} to your {name}."
    if kind == 1:
        task = rng.choice(TASKS)
        if rng.random() < 0.5:
            return f"Remind me to {task}.", f"OK, I'll remind you to {task}."
        instruction = rng.choice([f"Add a task to {task}.", f"Add a to-do to {task}.", f"Put a task on my list to {task}."])
        return instruction, f"I've added \"{task}\" to your to-do list."
    item, name = rng.choice(ITEMS), rng.choice(LISTS[:2])
    instruction = rng.choice([f"Remove {item} from my {name}.", f"Take {item} off the {name}."])
    return instruction, f"I've removed {item} from your {name}."


#: who a call goes to: many names (so that the answer copies the name it was given rather than recalling one), and
#: people by what they are to the user
CONTACTS = PEOPLE + ["Aisha", "Ben", "Carlos", "Chloe", "Daniel", "Elena", "Farah", "George", "Hana", "Ivan", "Jack",
                     "Julia", "Kenji", "Laura", "Leo", "Mia", "Mohammed", "Nora", "Oscar", "Paula", "Rosa", "Sam",
                     "Sofia", "Tariq", "Uma", "Victor", "Wei", "Yusuf", "Zoe", "Grace", "Henry", "Lily", "Max", "Ruth",
                     "mom", "dad", "grandpa", "my sister", "my brother", "my wife", "my husband", "my son",
                     "my daughter", "my doctor", "my neighbor", "my friend", "my aunt", "my uncle", "the office",
                     "the dentist", "the bank", "the vet", "the school"]


def _call(rng: random.Random) -> tuple[str, str]:
    contact = rng.choice(CONTACTS)
    instruction = rng.choice([f"Call {contact}.", f"Phone {contact}.", f"Ring {contact}.", f"Give {contact} a call.",
                              f"Please call {contact}.", f"Can you call {contact}?", f"Dial {contact}."])
    return instruction, f"Calling {contact}."


#: things a user may ask for that this assistant cannot do (it has timers, alarms, reminders, the weather service's
#: refusal, lights, appliances, music, lists, calendar entries and calls, nothing else): each is declined by name
UNSUPPORTED_ACTIONS = [
    "order a pizza", "order {item} online", "buy more {item}", "book a flight to {city}", "book a hotel room in {city}",
    "reserve two tickets for the concert", "pay the water bill", "send twenty dollars to {person}",
    "transfer money to my savings account", "unlock the car", "start the car", "open the window in the {room}",
    "open the back gate", "feed the cat", "water the plants", "vacuum the {room}", "wash the dishes",
    "do the laundry", "mow the lawn", "make me a sandwich", "iron my shirt", "translate this letter into German",
    "print my boarding pass", "scan this document", "share my location with {person}", "post a message on social media",
    "update my phone", "record a voice memo", "find my keys", "charge the car", "check my bank balance",
    "read me my emails", "open the banking app", "restart the router", "change the channel to the football match",
    "write a poem for {person}", "clean the windows", "fill up the bird feeder", "wrap the birthday present",
    "track my package", "rent a bike for the afternoon", "sign me up for the gym", "fix the dripping tap",
    # what shares a verb with a skill the assistant has but asks for something else: the verb alone ("play",
    # "start", "book", "set", "show") does not make a request one of its skills
    "play a movie on the television", "play the next episode of my show", "play a game of chess with me",
    "start a workout", "start navigation to {city}", "start recording the meeting",
    "start a group chat with {person}", "book a train ticket to {city}", "book a rental car in {city}",
    "book tickets for the zoo", "set the table for dinner", "set up a new email account", "show me a map of {city}",
    "show me the recipe for pancakes", "show me my step count", "take me to the nearest gas station",
    "take a screenshot", "take notes in the meeting", "read me a bedtime story", "read the recipe out loud",
    "turn off my phone", "charge my phone", "add money to my bus card",
]


def _unsupported(rng: random.Random) -> tuple[str, str]:
    """An action outside what the assistant can do: declined, naming what was asked (never pretending it is done)
    through the ``request`` tool, which repeats the request itself (slm.tool_calls.echo_request)."""
    action = rng.choice(UNSUPPORTED_ACTIONS).format(item=rng.choice(ITEMS), city=rng.choice(CITIES),
                                                    person=rng.choice(PEOPLE), room=rng.choice(ROOMS))
    instruction = rng.choice([f"{action[0].upper()}{action[1:]}.", f"Please {action}.", f"Can you {action}?",
                              f"Could you {action} for me?", f"I need you to {action}."])
    return instruction, DECLINE


#: the operator a calc call writes for each spoken one
CALC_OPERATORS = {"plus": "+", "minus": "-", "times": "*", "divided by": "/"}


def _arithmetic(rng: random.Random) -> tuple[str, str]:
    if rng.random() < 0.15:
        a = rng.randint(2, 999)  # the model copies a number of any size into its call, as the request wrote it
        instruction = rng.choice([f"What is {a} squared?", f"What's {a} squared?", f"Calculate {a} squared."])
        return instruction, f"{a} squared is <<calc: {a} ** 2>>."
    op = rng.choice(list(CALC_OPERATORS))
    top = rng.choice([99, 99, 999])
    if op == "plus":
        a, b = rng.randint(1, top), rng.randint(1, top)
    elif op == "minus":
        a = rng.randint(10, top + 21)
        b = rng.randint(1, a - 1)
    elif op == "times":
        a, b = rng.randint(2, 15), rng.randint(2, 12)
    else:
        b = rng.randint(2, 12)
        a = b * rng.randint(2, 12)
    instruction = rng.choice([f"What is {a} {op} {b}?", f"What's {a} {op} {b}?", f"Calculate {a} {op} {b}.",
                              f"How much is {a} {op} {b}?"])
    return instruction, f"{a} {op} {b} is <<calc: {a} {CALC_OPERATORS[op]} {b}>>."


def _conversion(rng: random.Random) -> tuple[str, str]:
    if rng.random() < 0.2:
        celsius = rng.choice([-10, 0, 5, 10, 15, 20, 25, 30, 37, 40, 100])
        instruction = rng.choice([f"Convert {celsius} degrees Celsius to Fahrenheit.",
                                  f"What is {celsius} degrees Celsius in Fahrenheit?"])
        return instruction, f"{celsius} degrees Celsius is <<convert: {celsius} celsius -> fahrenheit>> degrees Fahrenheit."
    one, many, factor, to_one, to_many = rng.choice(CONVERSIONS)
    value = rng.choice([1, 2, 3, 4, 5, 6, 8, 10, 12, 15, 20, 25, 50, 100])
    unit = one if value == 1 else many
    to_unit = to_one if value * factor == 1 else to_many
    instruction = rng.choice([f"Convert {value} {unit} to {to_many}.", f"How many {to_many} is {value} {unit}?",
                              f"What is {value} {unit} in {to_many}?"])
    return instruction, f"{value} {unit} is about <<convert: {value} {unit} -> {to_unit}>> {to_unit}."


def _calendar(rng: random.Random) -> tuple[str, str]:
    day = rng.choice(DAYS)
    on_day = day if day == "tomorrow" else f"on {day}"
    if rng.random() < 0.4:
        instruction = rng.choice([f"What's on my calendar {on_day}?", f"Do I have any meetings {on_day}?",
                                  f"What is my schedule {on_day}?"])
        return instruction, (f"I can't access your calendar, so I don't know your plans {on_day}. "
                             f"Please open your calendar app to check.")
    event, person = rng.choice(EVENTS), rng.choice(PEOPLE)
    hour = rng.randint(8, 17)
    clock = f"{hour if hour <= 12 else hour - 12} {'a.m.' if hour < 12 else 'p.m.'}"
    instruction = rng.choice([f"Schedule a {event} with {person} {on_day} at {clock}.",
                              f"Add a {event} with {person} to my calendar {on_day} at {clock}.",
                              f"Book a {event} with {person} {on_day} at {clock}."])
    return instruction, f"I've added a {event} with {person} {on_day} at {clock} to your calendar."


def _clock(rng: random.Random) -> tuple[str, str]:
    if rng.random() < 0.5:
        return rng.choice(["What time is it?", "What's the time?", "Tell me the time.", "What time is it now?",
                           "Do you know what time it is?"]), "It's <<time>>."
    return rng.choice(["What's the date today?", "What is today's date?", "What day is it today?", "What day is it?",
                       "Tell me today's date.", "What's the date?"]), "Today is <<date>>."


COMPANIES = ["Apple", "Google", "Amazon", "Tesla", "Microsoft", "Nike", "Toyota", "Netflix"]
TEAMS = ["Chicago", "Boston", "Madrid", "London", "Toronto", "Denver", "Seattle", "Dublin"]
PLACES = ["Eiffel Tower", "Big Ben", "Golden Gate Bridge", "Statue of Liberty", "Sydney Opera House", "Colosseum",
          "Tower Bridge", "Empire State Building"]
PERSON_FACTS = ["How old is {p}?", "Where does {p} live?", "What is {p}'s phone number?", "When is {p}'s birthday?"]


#: general-knowledge questions that no row answers (:data:`FACTS` are the facts the model is taught): whatever their
#: form, the model cannot know the answer, so it says so rather than making one up
UNTAUGHT_QUESTIONS = ["Who wrote {book}?", "Who discovered {discovery}?", "Who composed {music}?",
                      "What is the largest {kind} in the world?", "What is the smallest {kind} in the world?",
                      "What color is {colored}?", "What does {animal} eat?", "Where do {animals} live?",
                      "What is the national dish of {country}?", "What is the currency of {country}?",
                      "When did {event} happen?", "Who was the first person to {feat}?",
                      "What is the main ingredient of {dish}?", "What is the meaning of the word {word}?",
                      "What is a baby {animal_noun} called?", "What is the chemical symbol for {element}?"]
UNTAUGHT_SLOTS = {
    "book": ["War and Peace", "Pride and Prejudice", "The Hobbit", "Don Quixote", "Moby Dick", "Hamlet"],
    "discovery": ["penicillin", "electricity", "radium", "the electron", "insulin", "oxygen"],
    "music": ["the Four Seasons", "the Moonlight Sonata", "Swan Lake", "the Magic Flute"],
    "kind": ["desert", "lake", "island", "bird", "fish", "country", "forest", "volcano"],
    "colored": ["a flamingo", "a ruby", "an emerald", "a canary", "a lemon", "a plum", "copper", "a robin's egg"],
    "animal": ["a koala", "a panda", "a hedgehog", "a beaver", "an owl", "a crab"],
    "animals": ["penguins", "kangaroos", "polar bears", "camels", "lemurs", "otters"],
    "country": ["Peru", "Kenya", "Vietnam", "Sweden", "Morocco", "Chile", "Greece", "Thailand"],
    "event": ["the first moon landing", "the fall of the Berlin Wall", "the first Olympic Games",
              "the invention of printing"],
    "feat": ["climb Mount Everest", "fly across the Atlantic", "sail around the world", "walk in space"],
    "dish": ["guacamole", "hummus", "risotto", "paella", "pesto", "sushi"],
    "word": ["serendipity", "ephemeral", "ubiquitous", "melancholy", "gregarious"],
    "animal_noun": ["kangaroo", "swan", "goat", "deer", "seal"],
    "element": ["silver", "iron", "sodium", "lead", "tin"],
}


def _unknown(rng: random.Random) -> tuple[str, str]:
    """A question about live data or the world that nothing taught the model: answered "I don't know that."."""
    if rng.random() < 0.4:
        question = rng.choice(UNTAUGHT_QUESTIONS)
        return question.format(**{slot: rng.choice(values) for slot, values in UNTAUGHT_SLOTS.items()}), UNKNOWN_ANSWER
    city, other, place = rng.choice(CITIES), rng.choice(CITIES), rng.choice(PLACES)
    questions = [f"What is the stock price of {rng.choice(COMPANIES)} today?",
                 f"How much is a share of {rng.choice(COMPANIES)} worth right now?",
                 f"Who won the {rng.choice(TEAMS)} game last night?", f"What was the score of the {rng.choice(TEAMS)} game?",
                 f"How is the traffic in {city} right now?", "What is the exchange rate of the dollar to the euro?",
                 f"How much does {rng.choice(ITEMS)} cost at the store today?", f"What is the population of {city}?",
                 f"How far is {city} from {other}?" if city != other else f"How big is {city}?",
                 f"When was the {place} built?", f"How tall is the {place}?", f"Who built the {place}?",
                 f"Who is the mayor of {city}?", f"What is the best restaurant in {city}?",
                 rng.choice(PERSON_FACTS).format(p=rng.choice(PEOPLE)), f"Is the bank in {city} open right now?"]
    return rng.choice(questions), UNKNOWN_ANSWER


def _general_question(rng: random.Random) -> tuple[str, str]:
    question, answer = rng.choice(FACTS)
    prefix = rng.choice(FACT_PREFIXES)
    if prefix:
        question = prefix + question[0].lower() + question[1:]
    return question, answer


ASSISTANT_GENERATORS = [_timer, _alarm, _weather, _lights, _music, _lists, _arithmetic, _conversion, _calendar,
                        _general_question, _clock, _unknown, _call, _unsupported]
#: the generators whose answers hold a tool call or a refusal (:func:`tool_examples`)
TOOL_GENERATORS = [_arithmetic, _conversion, _clock, _unknown, _unsupported]


def assistant_example(rng: random.Random, spoken: bool, generators=tuple(ASSISTANT_GENERATORS)) -> dict:
    """One voice-assistant request from one of ``generators``; ``spoken`` gives it a filler prefix/suffix and the
    form the pipeline gives the model a transcript in (spelt out as a recogniser writes it, then
    ``duet.text.request_text``: numbers in digits)."""
    instruction, output = rng.choice(generators)(rng)
    if spoken:
        # "can you" before a question reads badly ("can you what is ..."): questions only get a wake phrase.
        question = instruction.endswith("?")
        prefix = rng.choice(["", "hey assistant "] if question else POLITE_PREFIX)
        suffix = rng.choice(["", " please"] if question or "please" in prefix else POLITE_SUFFIX)
        instruction = request_text(asr_form(prefix + instruction.rstrip(".?!") + suffix))
    instruction = instruction.replace("..", ".")
    return {"instruction": instruction, "input": "", "output": output}


def general_task(rng: random.Random) -> dict:
    """One general (text-in, text-out) task; most carry an ``input`` field."""
    kind = rng.randrange(9)
    if kind == 0:
        sentence, label = rng.choice(SENTIMENTS)
        instruction = rng.choice(["Classify the sentiment of the sentence as Positive, Negative or Neutral.",
                                  "Is the following sentence positive, negative or neutral?",
                                  "Determine the sentiment of this review."])
        return {"instruction": instruction, "input": sentence, "output": label}
    if kind == 1:
        present, past = rng.choice(TENSES)
        return {"instruction": rng.choice(["Rewrite the sentence in the past tense.", "Change this sentence to the past tense."]),
                "input": present, "output": past}
    if kind == 2:
        rude, polite = rng.choice(POLITE)
        return {"instruction": rng.choice(["Rewrite the sentence to make it more polite.", "Make this request sound polite."]),
                "input": rude, "output": polite}
    if kind == 3:
        numbers = rng.sample(range(1, 100), rng.randint(3, 7))
        descending = rng.random() < 0.3
        order = "descending" if descending else "ascending"
        return {"instruction": f"Sort the numbers in {order} order.", "input": ", ".join(map(str, numbers)),
                "output": ", ".join(map(str, sorted(numbers, reverse=descending)))}
    if kind == 4:
        words = rng.choice(TENSES + POLITE)[rng.randrange(2)]
        count = len(words.split())
        return {"instruction": "Count the words in the sentence.", "input": words, "output": f"The sentence has {count} words."}
    if kind == 5:
        name, group = rng.choice(list(ANIMALS.items()))
        return {"instruction": "Classify the animal as a mammal, bird, fish, reptile or amphibian.",
                "input": name, "output": f"A {name} is a {group}."}
    if kind == 6:
        name, group = rng.choice(list(FOODS.items()))
        return {"instruction": rng.choice(["Is this a fruit or a vegetable?", "Classify the food as a fruit or a vegetable."]),
                "input": name, "output": f"{name.capitalize()} is a {group}."}
    if kind == 7:
        n = rng.randint(1, 200)
        parity = "even" if n % 2 == 0 else "odd"
        return {"instruction": rng.choice(["Is the number even or odd?", "Tell me whether this number is even or odd."]),
                "input": str(n), "output": f"{n} is an {parity} number." if parity == "odd" else f"{n} is an even number."}
    a, b = rng.sample(range(1, 1000), 2)
    return {"instruction": "Which number is larger?", "input": f"{a} or {b}", "output": f"{max(a, b)} is larger than {min(a, b)}."}


# ----------------------------------------------------------------------------------------------------
# Requests drawn from the speech corpus's own templates (duet.synth.corpus_text), so the model has seen the
# exact wording the voice pipeline will transcribe. Only templates with a deterministic answer are used.
# ----------------------------------------------------------------------------------------------------

def _seconds_text(seconds: int) -> str:
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{n} {unit}{'' if n == 1 else 's'}" for n, unit in ((hours, "hour"), (minutes, "minute"), (secs, "second")) if n]
    return " and ".join(parts)


def _clock_text(raw) -> str:
    hour, minute, part = raw
    suffix = {"in the morning": " a.m.", "in the afternoon": " p.m.", "in the evening": " p.m."}.get(part, "")
    if part == "at night":
        suffix = " p.m." if hour in (9, 10, 11) else " a.m."
    return f"{hour}:{minute:02d}{suffix}"


_WEEKDAYS = {"monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"}


def _day(text: str) -> str:
    return " ".join(w.capitalize() if w in _WEEKDAYS else w for w in text.split())


def _yours(text: str) -> str:
    return " ".join("your" if w == "my" else w for w in text.split())


def _name(text: str) -> str:
    """A name capitalised ("aunt rosa" -> "Aunt Rosa"); someone named by a role stays lower case ("my boss")."""
    return text if text.split()[0] in ("my", "the") else " ".join(w.capitalize() for w in text.split())


# the units' definitions (the international mile, pound and foot; the US gallon and cup), so that a reference agrees
# with pint's conversion to the last decimal an answer writes
_MILE_KM, _POUND_KG, _GALLON_L, _CUP_ML = 1.609344, 0.45359237, 3.785411784, 236.5882365
_CONVERT = {("miles", "kilometers"): _MILE_KM, ("kilometers", "miles"): 1 / _MILE_KM, ("pounds", "kilograms"): _POUND_KG,
            ("kilograms", "pounds"): 1 / _POUND_KG, ("liters", "gallons"): 1 / _GALLON_L, ("feet", "meters"): 0.3048,
            ("inches", "centimeters"): 2.54, ("cups", "milliliters"): _CUP_ML}
# how many SMALL in one BIG
_PER_UNIT = {("grams", "pounds"): 1000 * _POUND_KG, ("ounces", "pounds"): 16, ("grams", "kilograms"): 1000,
             ("centimeters", "inches"): 2.54, ("inches", "feet"): 12, ("feet", "miles"): 5280,
             ("meters", "kilometers"): 1000, ("cups", "liters"): 1000 / _CUP_ML, ("milliliters", "cups"): _CUP_ML,
             ("teaspoons", "tablespoons"): 3, ("minutes", "days"): 1440, ("seconds", "hours"): 3600,
             ("pints", "gallons"): 8, ("yards", "miles"): 1760, ("millimeters", "inches"): 25.4}
_NO_WEATHER = ("I don't have access to live weather data, so I can't tell you the weather{where}. "
               "Please check a weather service for the latest forecast.")


def _degrees_answer(raw) -> str:
    n, scale, other = raw
    value = n * 9 / 5 + 32 if scale == "celsius" else (n - 32) * 5 / 9
    return f"{n} degrees {scale.capitalize()} is about {fmt_number(value)} degrees {other.capitalize()}."


def _unit_for(n, plural: str) -> str:
    """The unit's name for ``n`` of it: the plural, or its singular for exactly one ("1 foot", "1 inch", "1 meter")."""
    return plural if n != 1 else {"inches": "inch", "feet": "foot"}.get(plural, plural[:-1])


def _unit_answer(raw) -> str:
    small, n, big_plural = raw
    big = _unit_for(n, big_plural)
    return f"There are about {fmt_number(n * _PER_UNIT[(small, big_plural)])} {small} in {n} {big}."


#: corpus template -> answer built from its raw slot values
CORPUS_ANSWERS = {
    "set a timer for {duration}": lambda s: f"OK, your timer is set for {_seconds_text(s['duration'])}. I'll let you know when it's done.",
    "start a countdown for {duration}": lambda s: f"OK, your timer is set for {_seconds_text(s['duration'])}. I'll let you know when it's done.",
    "set a {food} timer for {duration}": lambda s: f"OK, your {s['food']} timer is set for {_seconds_text(s['duration'])}. I'll let you know when it's done.",
    "cancel the {food} timer": lambda s: f"I've cancelled the {s['food']} timer.",
    "pause the timer": lambda s: "Timer paused.",
    "set two timers one for {duration} and one for {duration2}": lambda s: f"OK, I've set two timers: one for {_seconds_text(s['duration'])} and one for {_seconds_text(s['duration2'])}.",
    "remind me in {duration} to check the {food}": lambda s: f"OK, I'll remind you in {_seconds_text(s['duration'])} to check the {s['food']}.",
    "wake me up at {clock_time}": lambda s: f"Done. Your alarm is set for {_clock_text(s['clock_time'])}.",
    "set an alarm for {clock_time} on {weekday}": lambda s: f"Done. Your alarm is set for {_clock_text(s['clock_time'])} on {s['weekday'].capitalize()}.",
    "turn off my {clock_time} alarm": lambda s: f"I've turned off your {_clock_text(s['clock_time'])} alarm.",
    "move my alarm to {clock_time}": lambda s: f"Your alarm is now set for {_clock_text(s['clock_time'])}.",
    "snooze for {duration}": lambda s: f"Snoozing for {_seconds_text(s['duration'])}.",
    "remind me to {chore} {day_ref}": lambda s: f"OK, I'll remind you to {_yours(s['chore'])} {_day(s['day_ref'])}.",
    "remind me to {chore} at {clock_time}": lambda s: f"OK, I'll remind you to {_yours(s['chore'])} at {_clock_text(s['clock_time'])}.",
    "remind me in {duration} to {chore}": lambda s: f"OK, I'll remind you in {_seconds_text(s['duration'])} to {_yours(s['chore'])}.",
    "what is the weather like in {city} {day_ref}": lambda s: _NO_WEATHER.format(where=f" in {_name(s['city'])} {_day(s['day_ref'])}"),
    "will it {weather_word} in {city} {day_ref}": lambda s: _NO_WEATHER.format(where=f" in {_name(s['city'])} {_day(s['day_ref'])}"),
    "how hot will it be in {city} {day_ref}": lambda s: _NO_WEATHER.format(where=f" in {_name(s['city'])} {_day(s['day_ref'])}"),
    "do i need an umbrella {day_ref}": lambda s: _NO_WEATHER.format(where=f" {_day(s['day_ref'])}"),
    "what is the temperature outside": lambda s: _NO_WEATHER.format(where=" outside"),
    "give me the weather forecast for {weekday}": lambda s: _NO_WEATHER.format(where=f" on {s['weekday'].capitalize()}"),
    "turn {on_off} the lights in the {room}": lambda s: f"Turning the {s['room']} lights {s['on_off']}.",
    "dim the {room} lights to {percent} percent": lambda s: f"Setting the {s['room']} lights to {s['percent']} percent.",
    "set the thermostat to {temperature} degrees": lambda s: f"Setting the thermostat to {s['temperature']} degrees.",
    "turn {on_off} the {appliance}": lambda s: f"Turning the {s['appliance']} {s['on_off']}.",
    "lock the front door": lambda s: "Locking the front door.",
    "close the blinds in the {room}": lambda s: f"Closing the blinds in the {s['room']}.",
    "play some {genre} music": lambda s: f"Playing {s['genre']} music.",
    "skip this song": lambda s: "Skipping to the next song.",
    "turn the volume up to {volume_level}": lambda s: f"Volume set to {s['volume_level']}.",
    "stop the music in the {room}": lambda s: f"Stopping the music in the {s['room']}.",
    "add {grocery} to my shopping list": lambda s: f"I've added {s['grocery']} to your shopping list.",
    "remove {grocery} from my {list_name}": lambda s: f"I've removed {s['grocery']} from your {s['list_name'].replace('to do', 'to-do')}.",
    "add {grocery} and {grocery2} to my {list_name}": lambda s: f"I've added {s['grocery']} and {s['grocery2']} to your {s['list_name'].replace('to do', 'to-do')}.",
    "add {chore} to my to do list": lambda s: f"I've added \"{s['chore']}\" to your to-do list.",
    "what is {number} plus {number2}": lambda s: f"{s['number']} plus {s['number2']} is {s['number'] + s['number2']}.",
    "add {number} and {number2}": lambda s: f"{s['number']} plus {s['number2']} is {s['number'] + s['number2']}.",
    "what is {number} minus {small_number}": lambda s: f"{s['number']} minus {s['small_number']} is {s['number'] - s['small_number']}.",
    "what is {small_number} times {small_number2}": lambda s: f"{s['small_number']} times {s['small_number2']} is {s['small_number'] * s['small_number2']}.",
    "how much is {small_number} times {number}": lambda s: f"{s['small_number']} times {s['number']} is {s['small_number'] * s['number']}.",
    "what is {number} divided by {small_number}": lambda s: f"{s['number']} divided by {s['small_number']} is {fmt_number(s['number'] / s['small_number'])}.",
    "what is {percent} percent of {number}": lambda s: f"{s['percent']} percent of {s['number']} is {fmt_number(s['percent'] * s['number'] / 100)}.",
    "what is the square root of {square}": lambda s: f"The square root of {s['square']} is {round(s['square'] ** 0.5)}.",
    "what is {number} squared": lambda s: f"{s['number']} squared is {s['number'] ** 2}.",
    "convert {conversion}": lambda s: "{0} {1} is about {3} {2}.".format(*s["conversion"], fmt_number(s["conversion"][0] * _CONVERT[s["conversion"][1:]])),
    "what is {degrees}": lambda s: _degrees_answer(s["degrees"]),
    "how many {unit_pair}": lambda s: _unit_answer(s["unit_pair"]),
    "how many {unit_pair} roughly": lambda s: _unit_answer(s["unit_pair"]),
    "what is on my calendar {day_ref}": lambda s: f"I can't access your calendar, so I don't know your plans {_day(s['day_ref'])}. Please open your calendar app to check.",
    "schedule a meeting with {person} {day_ref} at {clock_time}": lambda s: f"I've added a meeting with {_name(s['person'])} {_day(s['day_ref'])} at {_clock_text(s['clock_time'])} to your calendar.",
    "how do you spell {vocab_word}": lambda s: f"{s['vocab_word'].capitalize()} is spelled {'-'.join(s['vocab_word'].upper())}.",
    "call {person}": lambda s: f"Calling {_name(s['person'])}.",
    "send a message to {person} saying {short_message}": lambda s: f"Sending a message to {_name(s['person'])}: \"{s['short_message'].capitalize()}.\"",
}


def _unit_call(raw) -> str:
    small, n, big_plural = raw
    big = _unit_for(n, big_plural)
    return f"There are about <<convert: {n} {big} -> {small}>> {small} in {n} {big}."


def _degrees_call(raw) -> str:
    n, scale, other = raw
    return f"{n} degrees {scale.capitalize()} is about <<convert: {n} {scale} -> {other}>> degrees {other.capitalize()}."


#: corpus template -> its answer with a tool call (``slm.tool_calls``), for the templates whose answer is worked out:
#: the training rows. :data:`CORPUS_ANSWERS` keeps the worked-out value, the reference the executed call is judged by.
CORPUS_CALLS = {
    "what is {number} plus {number2}": lambda s: f"{s['number']} plus {s['number2']} is <<calc: {s['number']} + {s['number2']}>>.",
    "add {number} and {number2}": lambda s: f"{s['number']} plus {s['number2']} is <<calc: {s['number']} + {s['number2']}>>.",
    "what is {number} minus {small_number}": lambda s: f"{s['number']} minus {s['small_number']} is <<calc: {s['number']} - {s['small_number']}>>.",
    "what is {small_number} times {small_number2}": lambda s: f"{s['small_number']} times {s['small_number2']} is <<calc: {s['small_number']} * {s['small_number2']}>>.",
    "how much is {small_number} times {number}": lambda s: f"{s['small_number']} times {s['number']} is <<calc: {s['small_number']} * {s['number']}>>.",
    "what is {number} divided by {small_number}": lambda s: f"{s['number']} divided by {s['small_number']} is <<calc: {s['number']} / {s['small_number']}>>.",
    "what is {percent} percent of {number}": lambda s: f"{s['percent']} percent of {s['number']} is <<calc: {s['percent']} percent of {s['number']}>>.",
    "what is the square root of {square}": lambda s: f"The square root of {s['square']} is <<calc: sqrt({s['square']})>>.",
    "what is {number} squared": lambda s: f"{s['number']} squared is <<calc: {s['number']} ** 2>>.",
    "convert {conversion}": lambda s: "{0} {1} is about <<convert: {0} {1} -> {2}>> {2}.".format(*s["conversion"]),
    "what is {degrees}": lambda s: _degrees_call(s["degrees"]),
    "how many {unit_pair}": lambda s: _unit_call(s["unit_pair"]),
    "how many {unit_pair} roughly": lambda s: _unit_call(s["unit_pair"]),
}
#: corpus templates that ask what the model cannot know (facts it was not taught, live data): a refusal to learn
CORPUS_REFUSALS = {
    **dict.fromkeys(["how tall is {landmark}", "who invented the {invention}", "how far away is the {celestial}",
                     "what is the population of {country}", "when was the {invention} invented",
                     "what language do they speak in {country}", "how old is {landmark}",
                     "what happened in the year {year}", "what time is it in {city}", "who sings this song",
                     "when does the sun set in {city} {day_ref}"], lambda s: UNKNOWN_ANSWER),
    "is it going to {weather_word} {day_ref}": lambda s: _NO_WEATHER.format(where=f" {_day(s['day_ref'])}"),
    "how windy is it in {city} right now": lambda s: _NO_WEATHER.format(where=f" in {_name(s['city'])} right now"),
}


def corpus_answer(template: str):
    """The answer a training row gives a corpus template: its tool call, its plain answer or its refusal (None:
    the template has none and is skipped)."""
    return CORPUS_CALLS.get(template) or CORPUS_ANSWERS.get(template) or CORPUS_REFUSALS.get(template)


def corpus_examples(n_examples: int, seed: int, exclude: set[str] = frozenset(),
                    templates: set[str] | None = None) -> list[dict]:
    """Requests from the speech corpus templates with an answer (:func:`corpus_answer`; the others are skipped),
    or only from ``templates``, each in the form the voice pipeline gives the model (``duet.text.request_text``)."""
    examples = []
    for sentence in assistant_requests(12 * n_examples, seed=seed, exclude=exclude):
        answer = corpus_answer(sentence.template)
        if answer is not None and (templates is None or sentence.template in templates):
            examples.append({"instruction": request_text(sentence.text), "input": "", "output": answer(sentence.slots)})
            if len(examples) == n_examples:
                return examples
    raise RuntimeError(f"only {len(examples)} corpus requests with an answer; draw more")


def tool_examples(n_examples: int, seed: int) -> list[dict]:
    """``n_examples`` distinct rows whose answer is a tool call or a refusal, in the mix of :func:`make_examples`:
    ``corpus_fraction`` of them from the corpus templates with a call or a refusal, the rest from
    :data:`TOOL_GENERATORS` (a third of those in the recogniser's form). No held-out sentence among them."""
    held_out = set(held_out_texts())
    rng = random.Random(seed)
    corpus = corpus_examples(n_examples // 3, seed, exclude=held_out, templates={*CORPUS_CALLS, *CORPUS_REFUSALS}) \
        if n_examples >= 3 else []
    return _add_distinct(corpus, n_examples, lambda: assistant_example(rng, spoken=rng.random() < 1 / 3,
                                                                       generators=TOOL_GENERATORS), held_out, rng)


def make_examples(n_examples: int, seed: int, corpus_fraction: float = 0.35) -> list[dict]:
    """Deterministic mix, no duplicates: ``corpus_fraction`` from the speech-corpus templates, the rest
    60 % own assistant requests (half of them in ASR form) and 40 % general tasks.

    No instruction is a sentence the bundled speech sample holds out (dev-clean, test-clean): the voice
    pipeline is scored on those utterances, so the language model must not have been taught them.
    """
    held_out = set(held_out_texts())
    rng = random.Random(seed)

    def draw() -> dict:
        roll = rng.random()
        return assistant_example(rng, spoken=roll < 0.3) if roll < 0.6 else general_task(rng)

    return _add_distinct(corpus_examples(int(n_examples * corpus_fraction), seed, exclude=held_out), n_examples, draw,
                         held_out, rng)


def _add_distinct(first: list[dict], n_examples: int, draw, held_out: set[str],
                  rng: random.Random | None = None) -> list[dict]:
    """``first`` without repeats, then rows of ``draw()`` that are new and not held out, up to ``n_examples``;
    shuffled by ``rng`` when given."""
    examples, seen = [], set()
    for example in first:
        if (example["instruction"], "") not in seen:
            seen.add((example["instruction"], ""))
            examples.append(example)
    attempts = 0
    while len(examples) < n_examples:
        attempts += 1
        if attempts > 50 * n_examples:
            raise RuntimeError(f"only {len(examples)} distinct examples after {attempts} attempts; enlarge the tables")
        example = draw()
        key = (example["instruction"], example["input"])
        said = {normalize_text(example["instruction"]), asr_form(example["instruction"])}  # "10" or "ten"
        if key not in seen and not said & held_out:
            seen.add(key)
            examples.append(example)
    for example in examples:
        example["output"] = example["output"].replace("..", ".")  # "at 4 p.m." closing a sentence
    if rng is not None:
        rng.shuffle(examples)
    return examples
